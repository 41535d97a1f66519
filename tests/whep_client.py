"""A WHEP viewer on an independent WebRTC stack (aiortc, with PyAV's decoder) for the tests.

POSTs a recvonly H.264 + Opus offer to URL, plays for SECONDS, DELETEs the session and prints
one JSON line: the POST's status, the decoded pictures (count, keyframes, size, first one's
delay after the POST), the audio frames, and the DELETE's status. With PLIS, that many picture
loss indications (RFC 4585) are sent for the video, 700 ms apart from 1.5 s on, as a viewer
that lost a picture does.
Usage: whep_client.py URL SECONDS [PLIS]
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


async def main(url, seconds, plis=0):
    out = {"video_frames": 0, "keyframes": 0, "audio_frames": 0, "width": None, "height": None,
           "first_frame_ms": None, "plis": 0}
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
                    out["keyframes"] += 1 if frame.key_frame else 0
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
    if plis:
        # The video's SSRC, as the answer declares it.
        video = answer.split("m=video", 1)[1].split("m=audio", 1)[0]
        ssrc = int(next(l for l in video.splitlines() if l.startswith("a=ssrc:"))[7:].split()[0])
        receiver = next(t.receiver for t in pc.getTransceivers() if t.kind == "video")
        await asyncio.sleep(1.5)
        for _ in range(plis):
            await receiver._send_rtcp_pli(ssrc)
            out["plis"] += 1
            await asyncio.sleep(0.7)
        await asyncio.sleep(max(0, seconds - 1.5 - 0.7 * plis))
    else:
        await asyncio.sleep(seconds)
    out["connection"] = pc.connectionState
    out["delete_status"] = (await asyncio.to_thread(http, "DELETE", location))[0]
    await pc.close()
    for t in tasks:
        t.cancel()
    return out


if __name__ == "__main__":
    plis = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    result = asyncio.run(main(sys.argv[1], float(sys.argv[2]), plis))
    print(json.dumps(result), flush=True)
