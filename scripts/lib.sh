# Shared set-up for scripts/run and scripts/test: installs whatever is missing, every time, so a
# bare Debian 12 machine works with no other step. Sourced, not executed.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# Debian packages the build and the tests need. gcc builds the bundled SQLite.
APT_PACKAGES=(ca-certificates gcc libc6-dev pkg-config python3)

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

ensure_apt() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "==> installing Debian packages: ${missing[*]}"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
}

ensure_rust() {
  if ! command -v cargo >/dev/null 2>&1; then
    if [ -x "$HOME/.cargo/bin/cargo" ]; then
      export PATH="$HOME/.cargo/bin:$PATH"
    else
      echo "cargo not found: install Rust (rustup) first; rust-toolchain.toml pins the version" >&2
      exit 1
    fi
  fi
}

ensure_deps() {
  ensure_apt "${APT_PACKAGES[@]}"
  ensure_rust
}

# Python test tools live in a venv under target/, away from the system Python.
PY_TOOLS="$REPO_ROOT/target/pytools"

ensure_python_tool() {
  local package="$1" binary="$2"
  [ -x "$PY_TOOLS/bin/$binary" ] && return 0
  if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c 'import ensurepip' 2>/dev/null; then
    ensure_apt python3-venv
  fi
  [ -x "$PY_TOOLS/bin/pip" ] || python3 -m venv "$PY_TOOLS"
  echo "==> installing $package into $PY_TOOLS"
  "$PY_TOOLS/bin/pip" install --quiet --disable-pip-version-check "$package"
}
