#!/usr/bin/env bash
# Builds the Linux wheel with `maturin build --release`, installs it into python/.venv
# and runs the Python test suite against the installed package (not the sources).
#
# `.ci/run` calls it after `cargo test`. There the release profile's link-time
# optimisation and line tables are turned off (CI_WHEEL=fast, set by .ci/run): a fresh
# release build with them takes about 10 minutes on two cores, without them about 5.5,
# which keeps CI within its 30 minutes. The wheel is otherwise the one
# `pip install ./python` builds: same profile, same opt-level, same code. Without
# CI_WHEEL it builds exactly that profile.
set -euo pipefail
cd "$(dirname "$0")/.."
bash python/setup.sh >/dev/null
out=target/wheels
rm -rf "$out"
if [ "${CI_WHEEL:-}" = fast ]; then
    export CARGO_PROFILE_RELEASE_LTO=off CARGO_PROFILE_RELEASE_DEBUG=0
fi
python/.venv/bin/maturin build --release --quiet -m python/Cargo.toml --out "$out"
wheels=("$out"/apiary-*.whl)
if [ ${#wheels[@]} -ne 1 ] || [ ! -f "${wheels[0]}" ]; then
    echo "expected one wheel in $out, found: ${wheels[*]}" >&2
    exit 1
fi
echo "built ${wheels[0]} ($(du -h "${wheels[0]}" | cut -f1))"
python/.venv/bin/pip install --quiet --force-reinstall --no-deps "${wheels[0]}"

# Run from an empty directory so that `import apiary` finds the installed package, not
# python/apiary (the sources, without a built module).
repo=$PWD
python=$repo/python/.venv/bin/python
run_dir=$(mktemp -d)
trap 'rm -rf "$run_dir"' EXIT
cd "$run_dir"
module=$(PYTHONNOUSERSITE=1 "$python" -c 'import apiary, pathlib; print(pathlib.Path(apiary._apiary.__file__).resolve())')
case "$module" in
*/site-packages/*) echo "testing the installed module $module" ;;
*)
    echo "apiary imports from $module, not from the installed wheel" >&2
    exit 1
    ;;
esac
PYTHONNOUSERSITE=1 APIARY_EXPECT_MODULE="$module" "$python" -m pytest -q -p no:cacheprovider "$repo/python/tests"
