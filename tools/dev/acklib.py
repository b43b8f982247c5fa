"""What tools/dev/ack-gaps uses: the TCP headers of a capture, and when
an ACK first reported each data segment (cumulatively or in a SACK block)."""
import bisect
import collections
import subprocess

# The bed's port: data goes to it, ACKs come from it.
PORT = "7777"


def read_capture(pcap, offset=0.0):
    """Rows [time - offset, sport, dport, len, seq, ack, sack_le, sack_re] (strings but the
    time) of the TCP segments in `pcap`, sequence numbers absolute. A capture cut short by
    killing tcpdump reads up to where it ends."""
    out = subprocess.run(
        ["tshark", "-r", pcap, "-o", "tcp.relative_sequence_numbers:FALSE", "-T", "fields",
         "-e", "frame.time_epoch", "-e", "tcp.srcport", "-e", "tcp.dstport", "-e", "tcp.len",
         "-e", "tcp.seq", "-e", "tcp.ack", "-e", "tcp.options.sack_le",
         "-e", "tcp.options.sack_re"],
        capture_output=True, text=True, check=False).stdout
    rows = []
    for line in out.splitlines():
        r = line.split("\t")
        if len(r) < 6 or not r[3]:
            continue
        r[0] = float(r[0]) - offset
        rows.append(r)
    return rows


def is_data(r):
    return r[2] == PORT and r[3] != "0"


def by_connection(rows):
    """The rows of each connection (keyed by the sender's port), in order of first packet."""
    conns = collections.defaultdict(list)
    for r in rows:
        conns[r[1] if r[2] == PORT else r[2]].append(r)
    return sorted(conns.items(), key=lambda kv: kv[1][0][0])


def relative(rows):
    """Sequence numbers as offsets from the connection's first data octet."""
    base = int(next(r for r in rows if is_data(r))[4])
    return lambda x: (int(x) - base) & 0xFFFFFFFF


def reports(rows):
    """For one connection: (sent, reported, retransmitted) per data segment that an ACK
    reported, `sent` being its latest transmission before that ACK."""
    rel = relative(rows)
    keys, pending, sent, out = [], {}, set(), []
    for r in rows:
        t = r[0]
        if r[2] == PORT:
            if r[3] == "0":
                continue
            s = rel(r[4])
            if s > 1 << 31:
                continue
            if s not in pending:
                bisect.insort(keys, s)
            pending[s] = (t, s in sent)
            sent.add(s)
            continue
        if not r[5]:
            continue
        a = rel(r[5])
        if a > 1 << 31:
            continue
        spans = [(0, a)]
        if r[6]:
            spans += [(rel(lo), rel(hi)) for lo, hi in zip(r[6].split(","), r[7].split(","))]
        for lo, hi in spans:
            i, j = bisect.bisect_left(keys, lo), bisect.bisect_left(keys, hi)
            for s in keys[i:j]:
                t0, again = pending.pop(s)
                out.append((t0, t, again))
            del keys[i:j]
    return out


def us(seconds):
    """p10/p50/p90/p99 of durations in seconds, in µs."""
    v = sorted(seconds)
    if not v:
        return "nan/nan/nan/nan"
    return "/".join(f"{v[min(len(v) - 1, int(q * len(v)))] * 1e6:.0f}" for q in (.1, .5, .9, .99))
