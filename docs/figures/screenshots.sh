#!/usr/bin/env bash
# README's screenshots, taken again from the app as it is now: the browser tests that take them (headless Debian
# Chromium, the SmolLM2 preset, float32 on the CPU) write results/screenshots/, and the README's ones are copied here.
# Look at them before committing. Usage: bash docs/figures/screenshots.sh   (about 5 min on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/../.."
shots=results/screenshots
# test_browser.py first: its diff picture is replaced by test_browser_newcomer.py's (a dropped line, one deletion)
python -m pytest -q -p no:cacheprovider tests/test_browser.py \
  -k "test_diff_of_two_runs_and_acceptance_per_position or test_csd_memory_shows_its_entries_and_what_rescued"
python -m pytest -q -p no:cacheprovider tests/test_browser_newcomer.py -k \
  "test_the_first_comparison_runs_the_copying_sample or test_repeats_say_which_pass or \
test_rescoring_speaks_tokens or test_the_diff_shows_a_dropped_line"
for name in compare compare-repeats replay positions diff memory; do
  cp "$shots/$name.png" "docs/figures/$name.png"
  echo "docs/figures/$name.png  <-  $shots/$name.png ($(date -r "$shots/$name.png" '+%F %T'))"
done
