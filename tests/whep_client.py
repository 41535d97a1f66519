"""A WHEP viewer on an independent WebRTC stack (aiortc, with PyAV's decoder) for the tests.

POSTs a recvonly H.264 + Opus offer to URL, plays for SECONDS, DELETEs the session and prints
one JSON line: the POST's status, the decoded pictures (count, size, first one's delay after
the POST), the audio frames, and the DELETE's status.
Usage: whep_client.py URL SECONDS
"""
import asyncio, json, sys, time, urllib.error, urllib.parse, urllib.request

from aiortc import RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError


def http(method, url, body=None, ctype=None):
    req = urllib.request.Request(url, data=body, method=method)
    if ctype:
        req.add_header("Content-Type", ctype)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


async def main(url, seconds):
    out = {"video_frames": 0, "audio_frames": 0, "width": None, "height": None,
           "first_frame_ms": None}
    pc = RTCPeerConnection()
    pc.addTransceiver("video", direction="recvonly")
    pc.addTransceiver("audio", direction="recvonly")
    tasks = []

    async def consume(track, posted):
        try:
            while True:
                frame = await track.recv()
                if track.kind == "video":
                    if out["first_frame_ms"] is None:
                        out["first_frame_ms"] = round((time.monotonic() - posted) * 1000)
                    out["video_frames"] += 1
                    out["width"], out["height"] = frame.width, frame.height
                else:
                    out["audio_frames"] += 1
        except MediaStreamError:
            pass

    await pc.setLocalDescription(await pc.createOffer())  # gathers every candidate
    posted = time.monotonic()
    pc.on("track", lambda t: tasks.append(asyncio.ensure_future(consume(t, posted))))
    status, headers, answer = await asyncio.to_thread(
        http, "POST", url, pc.localDescription.sdp.encode(), "application/sdp")
    out["status"] = status
    if status != 201:
        out["body"] = answer
        await pc.close()
        return out
    location = urllib.parse.urljoin(url, headers.get("Location") or headers.get("location"))
    await pc.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
    await asyncio.sleep(seconds)
    out["connection"] = pc.connectionState
    out["delete_status"] = (await asyncio.to_thread(http, "DELETE", location))[0]
    await pc.close()
    for t in tasks:
        t.cancel()
    return out


if __name__ == "__main__":
    result = asyncio.run(main(sys.argv[1], float(sys.argv[2])))
    print(json.dumps(result), flush=True)
