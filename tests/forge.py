"""Forged frames for the source-guard tests (issue 22): not a test module.

`FORGER` is a script run inside a host's network namespace: it writes raw
Ethernet frames (AF_PACKET; IPv4 with a correct header checksum, UDP with
checksum 0, which IPv4 allows) to the host's interface, so the source address
and MAC are whatever the attacker chooses, not the host's. The payload starts
with a tag, so receivers tell forged datagrams from the job's own.

    python -c FORGER IFACE DST_IP DST_MAC PORT TAG COUNT PPS SRC_IP SRC_MAC
    python -c FORGER IFACE DST_IP DST_MAC PORT TAG COUNT PPS random SEED

With `random`, every frame has a fresh source address (10.128.0.0/9) and a fresh
locally administered unicast MAC, drawn from SEED; DST_IP may list several
destinations separated by commas (with as many MACs), used in turn. Prints the
frames sent and the seconds it took.

`RECEIVER` counts the datagrams on a UDP port by tag (joining a group when given
one); it prints "ready" once bound, then a JSON object tag -> count.
"""

from __future__ import annotations

FORGER = r"""
import random, socket, struct, sys, time
iface, dsts, dmacs, port, tag, count, pps = sys.argv[1:8]
dsts, dmacs, port, count, pps = dsts.split(","), dmacs.split(","), int(port), int(count), float(pps)
mode = sys.argv[8]
rng = random.Random(int(sys.argv[9]) if mode == "random" else 0)

def mac(text):
    return bytes(int(x, 16) for x in text.split(":"))

def csum(data):
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF

def frame(src_ip, src_mac, dst_ip, dst_mac, i):
    payload = f"{tag} {i} ".encode().ljust(64, b"x")
    udp = struct.pack("!HHHH", 40000 + i % 1000, port, 8 + len(payload), 0) + payload
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), i & 0xFFFF, 0, 16, 17, 0,
                      socket.inet_aton(src_ip), socket.inet_aton(dst_ip))
    hdr = hdr[:10] + struct.pack("!H", csum(hdr)) + hdr[12:]
    return mac(dst_mac) + src_mac + b"\x08\x00" + hdr + udp

s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((iface, 0))
s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
start = time.time()
for i in range(count):
    if mode == "random":
        src_ip = "10.%d.%d.%d" % (128 + rng.randrange(128), rng.randrange(256), 1 + rng.randrange(254))
        src_mac = bytes([0x02 | (rng.randrange(256) & 0xFC)] + [rng.randrange(256) for _ in range(5)])
    else:
        src_ip, src_mac = mode, mac(sys.argv[9])
    k = i % len(dsts)
    delay = start + i / pps - time.time()
    if delay > 0:
        time.sleep(delay)
    while True:
        try:
            s.send(frame(src_ip, src_mac, dsts[k], dmacs[k], i))
            break
        except BlockingIOError:
            time.sleep(0.001)
print(count, time.time() - start, flush=True)
"""

RECEIVER = r"""
import json, socket, struct, sys, time
port, group, ip, seconds = int(sys.argv[1]), sys.argv[2], sys.argv[3], float(sys.argv[4])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
s.bind(("", port))
if group != "-":
    s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, socket.inet_aton(group) + socket.inet_aton(ip))
s.settimeout(0.2)
print("ready", flush=True)
seen = {}
end = time.monotonic() + seconds
while time.monotonic() < end:
    try:
        data = s.recv(4096)
    except socket.timeout:
        continue
    tag = data.split(b" ")[0].decode(errors="replace")
    seen[tag] = seen.get(tag, 0) + 1
print(json.dumps(seen), flush=True)
"""

# The job's own stream: COUNT datagrams tagged TAG to GROUP:PORT at PPS, from IP.
SENDER = r"""
import socket, sys, time
group, port, ip, tag, count, pps = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5]), float(sys.argv[6])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(ip))
s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 8)
start = time.time()
for i in range(count):
    delay = start + i / pps - time.time()
    if delay > 0:
        time.sleep(delay)
    s.sendto(f"{tag} {i} ".encode().ljust(200, b"y"), (group, port))
print(count, time.time() - start, flush=True)
"""


def rss_kib(pid: int) -> int:
    """The resident set size of process `pid`, KiB (/proc/PID/status VmRSS)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for process {pid}")


def cpu_s(pid: int) -> float:
    """User plus system CPU seconds process `pid` has used (/proc/PID/stat)."""
    import os

    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
