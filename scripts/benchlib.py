"""Shared pieces of the bench scripts: the release daemon on loopback, its API and /metrics,
ffmpeg pushes of the recorded fixtures, /proc readings, and a follower that times LL-HLS parts.
"""
import json, os, re, resource, socket, subprocess, tempfile, threading, time, urllib.request
from datetime import datetime

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Where `cargo build --release` puts the daemon: CARGO_TARGET_DIR (relative to the checkout) if set.
RELEASE_BINARY = os.path.join(ROOT, os.environ.get("CARGO_TARGET_DIR") or "target", "release", "livepack")
KEY = "bench-key"
TICK = os.sysconf("SC_CLK_TCK")


def prepare():
    """Fixtures generated, release daemon built (both no-ops when already done)."""
    subprocess.run([os.path.join(ROOT, "scripts/make-fixtures")], check=True)
    subprocess.run(["cargo", "build", "--release", "--locked", "--quiet"], cwd=ROOT, check=True)


def iso(s):
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def get(url, timeout=10):
    req = urllib.request.Request(url, headers={"Authorization": f"apikey {KEY}"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.read().decode()


def percentile(sorted_values, q):
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def minor_faults(pid):
    with open(f"/proc/{pid}/stat") as f:
        # After the command name (which may hold spaces): minflt is the 8th field.
        return int(f.read().rsplit(")", 1)[1].split()[7])


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def children_cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


class Daemon:
    """The release daemon on loopback ports, its data in a fresh temporary directory."""

    def __init__(self, binary=None, prefix=(), log=None, **env):
        """`prefix`: a command the daemon runs under (e.g. `prlimit --nofile=1024:4096 --`);
        `log`: a file its log (stderr) goes to, else this process's stderr."""
        self.data = tempfile.mkdtemp(prefix="livepack-bench-")
        full = dict(os.environ, LIVEPACK_HTTP_ADDR="127.0.0.1:0", LIVEPACK_RTMP_ADDR="127.0.0.1:0",
                    LIVEPACK_RTMPS_ADDR="127.0.0.1:0", LIVEPACK_SRT_ADDR="127.0.0.1:0",
                    LIVEPACK_WHIP_UDP_ADDRS="127.0.0.1:0", LIVEPACK_WHIP_UDP_MUX_ADDR="127.0.0.1:0",
                    LIVEPACK_WHIP_TCP_MUX_ADDR="127.0.0.1:0", LIVEPACK_DATA_DIR=self.data,
                    LIVEPACK_API_KEYS=KEY, RUST_LOG="warn",
                    # The benches measure up to and past the machine's capacity: the measured
                    # admission check would refuse the streams they add (a bench sets it to
                    # measure it).
                    LIVEPACK_ADMISSION_CPU_PERCENT="100")
        full.update(env)
        self.log = open(log, "a") if log else None
        self.proc = subprocess.Popen([*prefix, binary or RELEASE_BINARY],
                                     env=full, stderr=self.log,
                                     stdout=subprocess.PIPE, text=True)
        banner = {}
        for line in self.proc.stdout:
            k, _, v = line.strip().partition(": ")
            banner[k] = v
            if k == "try":
                break
        if "http" not in banner:
            raise RuntimeError("the daemon did not start")
        self.base = "http://" + banner["http"]
        self.pid = self.proc.pid

    def api(self, path, body=None, method=None):
        req = urllib.request.Request(self.base + path, method=method,
                                     data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Authorization": f"apikey {KEY}",
                                              "content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read() or b"null")

    def create(self, **fields):
        return self.api("/streaming/streams", fields)

    def metrics(self):
        """/metrics as {(name, stream id or None): value}."""
        out = {}
        for line in get(self.base + "/metrics").splitlines():
            if not line or line.startswith("#"):
                continue
            m = re.match(r'^([a-z_]+)(?:\{stream="(\d+)"\})? (\S+)$', line)
            if m:
                out[(m.group(1), int(m.group(2)) if m.group(2) else None)] = float(m.group(3))
        return out

    def cpu_seconds(self):
        return cpu_seconds(self.pid)

    def rss_mib(self):
        return rss_mib(self.pid)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# The default ladder for a 720p source (height, video kbit/s), as the daemon encodes it.
LADDER = [(720, 3000), (480, 1500), (360, 800)]


def ladder_graph(ladder=LADDER):
    """ffmpeg's filter graph for the ladder: 30 fps, I420, split, one scale per rung ([o0]...)."""
    split = "".join(f"[v{i}]" for i in range(len(ladder)))
    return f"[0:v]fps=30,format=yuv420p,split={len(ladder)}{split};" + ";".join(
        f"[v{i}]scale=-2:{h}[o{i}]" for i, (h, _) in enumerate(ladder))


def x264_args(kbps, spec=""):
    """libx264 with the daemon's x264enc settings (veryfast, zerolatency, High, 2 s GOPs, no scene
    cuts, CBR with a 0.6 s VBV buffer as `pass=cbr` does); `spec` is a stream specifier (":0")."""
    return [f"-c:v{spec}", "libx264", f"-preset:v{spec}", "veryfast", f"-tune:v{spec}", "zerolatency",
            f"-profile:v{spec}", "high", f"-b:v{spec}", f"{kbps}k", f"-maxrate:v{spec}", f"{kbps}k",
            f"-bufsize:v{spec}", f"{kbps * 6 // 10}k", f"-g:v{spec}", "60",
            f"-x264-params:v{spec}", "scenecut=0"]


def ffmpeg_args(fixture, seconds, x264_threads=None, listen=None, progress=None):
    """The ffmpeg reference: the daemon's ladder encoded with the same x264 settings (+ AAC 128k)
    to a null sink, from fixtures/{fixture}.flv read at real-time speed for `seconds`, or, with
    `listen` (a URL from `listen_url`), from a push it receives as a server, as the daemon does.
    `progress`: a file for ffmpeg's -progress reports (out_time_us every 0.1 s)."""
    args = ["ffmpeg", "-hide_banner", "-loglevel", "error"]
    if progress:
        args += ["-progress", progress, "-stats_period", "0.1"]
    if listen:
        args += (["-listen", "1"] if listen.startswith("rtmp://") else []) + ["-i", listen]
    else:
        path = os.path.join(ROOT, "fixtures", fixture + ".flv")
        args += ["-re", "-stream_loop", "-1", "-t", str(seconds), "-i", path]
    args += ["-filter_complex", ladder_graph()]
    for i, (_, kbps) in enumerate(LADDER):
        args += ["-map", f"[o{i}]"] + x264_args(kbps, f":{i}")
        if x264_threads is not None:
            args += [f"-threads:v:{i}", str(x264_threads)]
    return args + ["-map", "0:a", "-c:a", "aac", "-b:a", "128k", "-ar", "48000", "-f", "null", "-"]


def listen_url(srt):
    """A loopback URL on a free port for an ffmpeg reference to receive one push on."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM if srt else socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"srt://127.0.0.1:{port}?mode=listener" if srt else f"rtmp://127.0.0.1:{port}/live/ref"


def ingest_reference(fixture, seconds, srt=False, x264_threads=None, progress=None):
    """The ffmpeg reference receiving a push of `fixture` for `seconds` as a server (an RTMP or SRT
    listener), as the daemon receives its own: returns (reference, pusher). Stop the reference
    first (a pusher to a stopped reference complains: it is quiet)."""
    url = listen_url(srt)
    ref = subprocess.Popen(ffmpeg_args(fixture, seconds, x264_threads, listen=url, progress=progress),
                           stdin=subprocess.DEVNULL)
    time.sleep(0.5)  # listening before the push connects
    return ref, push(url.split("?")[0], fixture, seconds, quiet=True)


def progress_seconds(path):
    """The media time (s) an ffmpeg reference has processed, from its last -progress report."""
    try:
        with open(path) as f:
            times = re.findall(r"^out_time_us=(\d+)$", f.read(), re.M)
        return int(times[-1]) / 1e6 if times else 0.0
    except OSError:
        return 0.0


def clip(fps, seconds, gop_seconds=2):
    """A test card with a tone as MPEG-TS at `fps`, `seconds` long, generated once into
    target/bench-clips. The fixtures loop every few seconds and each loop leaves a ~20 ms hole
    (audio and video do not end together), which a player crosses with a small stall: over a
    minute of playback that alone adds 0.1-0.2 s of latency, so player benches push one long
    clip instead. Returns a path for `push`."""
    gop_name = "" if gop_seconds == 2 else f"-gop{gop_seconds}"
    out = os.path.join(ROOT, "target", "bench-clips", f"card-{fps}fps-{seconds}s{gop_name}.ts")
    if not os.path.exists(out):
        os.makedirs(os.path.dirname(out), exist_ok=True)
        gop = str(fps * gop_seconds)
        subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y",
                        "-f", "lavfi", "-i", f"testsrc2=size=1280x720:rate={fps},format=yuv420p",
                        "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000,aformat=channel_layouts=stereo",
                        "-t", str(seconds), "-c:v", "libx264", "-preset", "veryfast", "-profile:v", "high",
                        "-g", gop, "-keyint_min", gop, "-sc_threshold", "0", "-b:v", "1500k",
                        "-maxrate", "1500k", "-bufsize", "3000k", "-c:a", "aac", "-b:a", "128k",
                        "-f", "mpegts", out + ".tmp"], check=True)
        os.rename(out + ".tmp", out)
    return out


def push(url, fixture, seconds, quiet=False):
    """ffmpeg replaying fixtures/{fixture}.flv over RTMP or .ts over SRT (or the file at the path
    `fixture`, e.g. a `clip`) at real-time speed for at least `seconds` (the clip loops).
    `quiet`: no error output (a pusher to an ffmpeg reference complains when that is stopped)."""
    srt = url.startswith("srt://")
    path = fixture if os.path.isabs(fixture) else \
        os.path.join(ROOT, "fixtures", fixture + (".ts" if srt else ".flv"))
    length = float(subprocess.run(["ffprobe", "-v", "error", "-show_entries", "format=duration", "-of",
                                   "csv=p=0", path], capture_output=True, text=True, check=True).stdout)
    loops = int(seconds / length) + 1
    return subprocess.Popen(["ffmpeg", "-hide_banner", "-loglevel", "error", "-re", "-stream_loop",
                             str(loops), "-i", path, "-c", "copy", "-f", "mpegts" if srt else "flv", url],
                            stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL if quiet else None)


def wait_started(daemon, stream_id, timeout=20):
    """The record's started_at_primary (when the publish was accepted) as a Unix time."""
    end = time.time() + timeout
    while time.time() < end:
        r = daemon.api(f"/streaming/streams/{stream_id}")
        if r["started_at_primary"] and r["live"]:
            return iso(r["started_at_primary"])
        time.sleep(0.05)
    raise RuntimeError(f"stream {stream_id} did not go live")


class PartFollower(threading.Thread):
    """Follows one rendition's LL-HLS playlist with blocking requests (_HLS_msn/_HLS_part) and
    records, for every part, how long after its last frame entered the ingest socket it became
    fetchable. Frame arrival is modelled by the pusher's real-time pacing: ffmpeg -re sends media
    time t at `started + t`, `started` being the publish acceptance (the record's
    started_at_primary); a part's media end is its segment's PROGRAM-DATE-TIME relative to the
    first segment seen plus the part durations before it and its own."""

    def __init__(self, playlist, started, until, fps=30):
        super().__init__(daemon=True)
        self.playlist, self.started, self.until, self.fps = playlist, started, until, fps
        self.samples = []  # (wall time fetchable, delay s, part duration s)
        self.errors = 0

    def run(self):
        text = ""
        for _ in range(150):
            try:
                text = get(self.playlist)
                if "part_" in text:
                    break
            except Exception:
                pass
            time.sleep(0.2)
        first_pdt = self.first_segment_pdt(text)
        msn, part = None, None
        while time.time() < self.until:
            if msn is None:
                m = re.findall(r'part_(\d+)_(\d+)\.m4s', text)
                if not m:
                    return
                msn, part = int(m[-1][0]), int(m[-1][1]) + 1
            try:
                text = get(f"{self.playlist}?_HLS_msn={msn}&_HLS_part={part}", timeout=15)
            except Exception:
                self.errors += 1
                msn = None
                time.sleep(0.2)
                continue
            now = time.time()
            name = f"part_{msn}_{part}.m4s"
            if name not in text:
                msn, part = msn + 1, 0  # the segment closed: the next segment's first part
                continue
            seg_pdt, offset, dur = None, 0.0, None
            for line in text.splitlines():
                if line.startswith("#EXT-X-PROGRAM-DATE-TIME:"):
                    seg_pdt, offset = iso(line.split(":", 1)[1]), 0.0
                elif line.startswith("#EXT-X-PART:"):
                    d = float(re.search(r"DURATION=([\d.]+)", line).group(1))
                    if f'URI="{name}"' in line:
                        dur = d
                        break
                    offset += d
            if dur is not None and seg_pdt is not None and first_pdt is not None:
                media_end = seg_pdt - first_pdt + offset + dur
                arrived = self.started + media_end - 1 / self.fps
                self.samples.append((now, now - arrived, dur))
            part += 1

    @staticmethod
    def first_segment_pdt(text):
        """PDT of media sequence 0, from the first listed segment (2-4 s segments, numbered from
        0 on a fresh stream): the first segment may already have left a short playlist."""
        seq = re.search(r"#EXT-X-MEDIA-SEQUENCE:(\d+)", text)
        pdt = re.search(r"#EXT-X-PROGRAM-DATE-TIME:(\S+)", text)
        if not seq or not pdt:
            return None
        before = 0.0
        if int(seq.group(1)) > 0:
            durations = [float(x) for x in re.findall(r"#EXTINF:([\d.]+)", text)]
            before = int(seq.group(1)) * (durations[0] if durations else 2.0)
        return iso(pdt.group(1)) - before
