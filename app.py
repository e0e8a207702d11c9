"""The Gradio workbench: `python app.py` (the Hugging Face Spaces entry point) or `python -m workbench serve`."""

from workbench.ui import build_app, launch

demo = build_app()

if __name__ == "__main__":
    launch(demo)
