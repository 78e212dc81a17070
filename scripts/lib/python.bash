# The Python package (python/, maturin + PyO3) in a virtualenv under
# cargo's target directory, for scripts/test and scripts/bench-python. Sourced; expects $top
# (the repository root).
#
#   python_venv DIR PACKAGE...   makes DIR a venv (python3 -m venv) holding
#                                the pinned PACKAGEs, installing only what
#                                is missing or at another version
#   python_install_package DIR   builds python/ and installs it into the venv
#                                with the README's own command,
#                                `pip install ./python` (maturin builds the
#                                extension in release through pyproject.toml;
#                                CARGO_TARGET_DIR, when set, is where)
#   python_install_wheel DIR WHEEL   installs a built wheel (scripts/release's,
#                                in dist/) into the venv, in place of the
#                                package there, building nothing

# The versions the tests run with.
PYTHON_TEST_PACKAGES=("pytest==9.2.0" "pytest-timeout==2.4.0")

python_venv() {
  local dir=$1
  shift
  if [ ! -x "$dir/bin/python" ]; then
    rm -rf "$dir"
    timeout 120 python3 -m venv "$dir"
  fi
  local missing=()
  local wanted
  for wanted in "$@"; do
    "$dir/bin/python" - "$wanted" <<'PY' 2>/dev/null || missing+=("$wanted")
import sys
from importlib.metadata import version
name, want = sys.argv[1].split("==")
sys.exit(version(name) != want)
PY
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "python: installing ${missing[*]} into $dir" >&2
    timeout 600 "$dir/bin/python" -m pip install --quiet --disable-pip-version-check "${missing[@]}" >&2
  fi
}

python_install_package() {
  local dir=$1
  # pip builds in a fresh isolated environment with maturin from PyPI (the
  # pyproject.toml's build-system), as a user's `pip install ./python` does.
  (cd "$top" && timeout 1200 "$dir/bin/python" -m pip install --quiet --disable-pip-version-check \
    --force-reinstall --no-deps ./python) >&2
}

python_install_wheel() {
  local dir=$1 wheel=$2
  timeout 600 "$dir/bin/python" -m pip install --quiet --disable-pip-version-check --no-index \
    --force-reinstall --no-deps "$wheel" >&2
}
