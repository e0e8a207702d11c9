"""`python -m workbench serve`: the Gradio workbench (`python app.py` does the same)."""

from __future__ import annotations

import argparse

from workbench.commands import common


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("serve", help="start the Gradio workbench (python app.py does the same)")
    p.add_argument(
        "--host", default=None, help="address to listen on (default 127.0.0.1; 0.0.0.0 to share on a network)"
    )
    p.add_argument(
        "--port",
        type=common.integer("port", 1, 65535),
        default=None,
        help="port (default 7860, or $GRADIO_SERVER_PORT)",
    )
    p.add_argument(
        "--single-user",
        action="store_true",
        help="every run in the store is visible to everyone who reaches the app (for a local, one-person "
        "workbench); by default a run made in the app is seen only by the browser session that made "
        "it until its owner shares it",
    )
    p.add_argument(
        "--allow-local-models",
        action="store_true",
        help="let the model boxes load local folders and .gguf files on this server (always so with "
        "--single-user); by default a shared app loads presets and Hugging Face hub ids only, so a "
        "visitor cannot make it open paths on the server",
    )
    p.add_argument(
        "--no-warm-up",
        action="store_true",
        help="do not load the default model and measure its forward cost t(n, L) while the page opens "
        "(by default the server does, once per machine, so the first comparison does not wait for it)",
    )
    # float32 is service.WORKBENCH_DTYPE (named here, not imported: importing service loads torch for --help)
    common.add_load_args(
        p,
        dtype_default="float32",
        dtype_help="float32 by default, where the strict methods write greedy's tokens; auto takes the device's "
        "fastest (bfloat16 on a CPU with native bfloat16, where near-ties in the logits make strict methods part "
        "from greedy's text now and then)",
    )
    common.add_db_arg(p)
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    from core.placement import placement_from_args
    from workbench.service import ModelPool, default_model, is_fetched
    from workbench.ui import build_app, launch

    placement = placement_from_args(args.device_map, args.max_memory, args.offload_folder)
    pool = ModelPool(args.device, args.dtype, trust_remote_code=args.trust_remote_code, placement=placement)
    demo = build_app(args.db, pool, single_user=args.single_user, allow_local_models=args.allow_local_models)
    if not args.no_warm_up and is_fetched(default_model()):
        pool.warm_up(default_model())
    launch(demo, server_name=args.host, server_port=args.port)
    return 0
