# Shared set-up for scripts/run and scripts/test: installs whatever is missing, every time, so a
# bare Debian 12 machine works with no other step. Sourced, not executed.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# Debian packages the daemon needs to build and run: gcc builds the bundled SQLite; GStreamer
# with its plugins does the transcoding (x264enc is in -ugly, avdec/avenc_aac in -libav).
APT_PACKAGES=(ca-certificates gcc libc6-dev pkg-config python3
  libgstreamer1.0-dev libgstreamer-plugins-base1.0-dev gstreamer1.0-plugins-base
  gstreamer1.0-plugins-good gstreamer1.0-plugins-bad gstreamer1.0-plugins-ugly
  gstreamer1.0-libav
  # HTML overlays: WPE WebKit as a GStreamer source (wpevideosrc), rendered without a GPU.
  gstreamer1.0-wpe)
# What the tests drive the daemon with: ffmpeg/ffprobe, headless Chromium (Node.js for the
# browser drivers comes with ensure_node_modules), srt-live-transmit, gst-launch-1.0, nginx
# with its RTMP module as an RTMP server for the PULL tests and as a restream target (its stream
# module terminating TLS in front for RTMPS), and VLC as a DASH player (cvlc
# from vlc-bin; its adaptive/DASH demuxer, HTTP access and TS muxer are in vlc-plugin-base),
# and HAProxy as the encoders' balancer that checks the nodes' /readyz.
TEST_APT_PACKAGES=(ffmpeg chromium srt-tools gstreamer1.0-tools nginx-core libnginx-mod-rtmp
  libnginx-mod-stream vlc-bin vlc-plugin-base haproxy)

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

# podman as it runs on these machines (no systemd as PID 1, a sandbox around the session): the
# runc runtime, cgroupfs, no default ulimits. Written once; an existing file is kept.
ensure_podman_config() {
  ensure_apt podman runc
  local conf=/etc/containers/containers.conf
  if [ ! -e "$conf" ]; then
    as_root mkdir -p /etc/containers
    printf '# written by livepack scripts/lib.sh\n[containers]\ndefault_ulimits = []\n\n[engine]\nruntime = "runc"\ncgroup_manager = "cgroupfs"\n' |
      as_root tee "$conf" >/dev/null
  fi
}

# A Debian 12 root made from packages by mmdebstrap (TARGET: a directory, or a .tar), with the
# Debian package DEB installed by apt, which fetches its dependencies from the mirror; INCLUDE:
# more packages; any further arguments go to mmdebstrap (its customize hooks).
# Usage: debian_root_with DEB TARGET INCLUDE [MMDEBSTRAP_ARGS...]
debian_root_with() {
  local deb="$1" target="$2" include="$3"
  shift 3
  ensure_apt mmdebstrap
  as_root mmdebstrap --quiet --variant=apt --include="$include" \
    --customize-hook="copy-in '$deb' /tmp" \
    --customize-hook="chroot \"\$1\" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends /tmp/$(basename "$deb")" \
    "$@" bookworm "$target" \
    "deb http://deb.debian.org/debian bookworm main" \
    "deb http://deb.debian.org/debian bookworm-updates main" \
    "deb http://deb.debian.org/debian-security bookworm-security main"
}

# A free TCP port on 127.0.0.1 (the kernel's choice), for a daemon a script starts.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
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

# Node.js and the npm packages (hls.js, playwright-core) from package-lock.json.
ensure_node_modules() {
  command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || ensure_apt nodejs npm
  if [ ! -d "$REPO_ROOT/node_modules/hls.js" ] || [ ! -d "$REPO_ROOT/node_modules/dashjs" ] \
     || [ ! -d "$REPO_ROOT/node_modules/playwright-core" ] \
     || [ ! -d "$REPO_ROOT/node_modules/swagger-ui-dist" ] \
     || [ "$REPO_ROOT/package-lock.json" -nt "$REPO_ROOT/node_modules/.package-lock.json" ]; then
    echo "==> npm ci"
    (cd "$REPO_ROOT" && npm ci --no-audit --no-fund --loglevel=error)
  fi
}

# PostgreSQL server binaries: the store tests and tests/postgres run each store test on a
# throwaway server they start themselves (tests/common/pg.rs: initdb, postgres on a free
# loopback port). Installed only when no initdb is on PATH or in Debian's versioned directory.
ensure_postgres() {
  if command -v initdb >/dev/null 2>&1 || compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; then
    return 0
  fi
  ensure_apt postgresql
}

ensure_test_deps() {
  ensure_deps
  ensure_apt "${TEST_APT_PACKAGES[@]}"
  ensure_postgres
  ensure_node_modules
  # aiortc: a second WebRTC stack (not Chromium's) as a WHEP viewer in the tests.
  ensure_python_module aiortc aiortc
  # moto's S3 server: an S3-compatible object store on loopback for the storage_url tests.
  ensure_python_tool "moto[server]" moto_server
}

# promtool (Prometheus's rule checker), taken out of Debian's prometheus package without
# installing it: the package would start a Prometheus server. Prints the binary's path.
ensure_promtool() {
  local dir="$REPO_ROOT/target/tools/prometheus"
  if [ ! -x "$dir/usr/bin/promtool" ]; then
    local tmp
    tmp="$(mktemp -d)"
    chmod 0755 "$tmp"
    echo "==> promtool from Debian's prometheus package" >&2
    (cd "$tmp" && { apt-get download prometheus >/dev/null 2>&1 \
      || { as_root apt-get update -qq && apt-get download prometheus >/dev/null 2>&1; }; })
    mkdir -p "$dir"
    dpkg-deb -x "$tmp"/prometheus_*.deb "$dir"
    rm -rf "$tmp"
  fi
  echo "$dir/usr/bin/promtool"
}

# Python test tools live in a venv under target/, away from the system Python.
PY_TOOLS="$REPO_ROOT/target/pytools"

pip_install() {
  local package="$1"
  if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c 'import ensurepip' 2>/dev/null; then
    ensure_apt python3-venv
  fi
  [ -x "$PY_TOOLS/bin/pip" ] || python3 -m venv "$PY_TOOLS"
  echo "==> installing $package into $PY_TOOLS"
  "$PY_TOOLS/bin/pip" install --quiet --disable-pip-version-check "$package"
}

# A Python tool run by its command (`binary`).
ensure_python_tool() {
  [ -x "$PY_TOOLS/bin/$2" ] || pip_install "$1"
}

# A Python package the tests import (`module`).
ensure_python_module() {
  "$PY_TOOLS/bin/python" -c "import $2" 2>/dev/null || pip_install "$1"
}
