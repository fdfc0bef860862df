#!/usr/bin/env python3
"""tools/compare_report.py: the parsing and formatting half of tools/compare.sh.

Reads the raw outputs compare.sh left in --raw (index.tsv names each run:
system, class, test, size, rep, exit status, file), keeps the best of the
repetitions (lowest median latency, highest bandwidth and message rate),
works out the ratios to the floor and to the best peer, and those of
malloc'd to pool buffers on each zdapl device and what registering each
costs (zd_reg_cost; issue 13), and writes:
  --out   the markdown table (also printed on stdout) and the goals block
  --json  the same as JSON
  --png   latency and bandwidth against size, drawn by gnuplot
`--check FILE.md` instead checks that a written table parses (used by the
meson test). Standard library only.
"""
import argparse
import datetime
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys

MIB = 1048576.0

# ---------------------------------------------------------------- parsing ---


def size_label(n):
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return "%dM" % (n >> 20)
    if n >= 1024 and n % 1024 == 0:
        return "%dK" % (n >> 10)
    return str(n)


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def last_error(path):
    """The last line of a benchmark's output that looks like a complaint."""
    try:
        with open(path, errors="replace") as f:
            lines = [l.strip() for l in f if l.strip()]
    except OSError:
        return ""
    for l in reversed(lines):
        if re.search(r"error|fail|refused|not implemented|DAT_", l, re.I):
            return l[:160]
    return lines[-1][:160] if lines else ""


def parse_ucx(path):
    """ucx_perftest's 'Final:' row: iterations, lat 50%, avg, overall,
    bw avg, overall (MB/s = 2^20 B/s), msg rate avg, overall (msg/s)."""
    try:
        with open(path, errors="replace") as f:
            rows = [l.split() for l in f if l.startswith("Final:")]
    except OSError:
        return None
    if not rows or len(rows[-1]) < 9:
        return None
    v = [float(x) for x in rows[-1][1:9]]
    return {"lat": v[1], "bw": v[5], "mr": v[7] / 1e6}


FI_SIZE = re.compile(r"^(\d+(?:\.\d+)?)([kmg]?)$")


def parse_fi(path, size):
    """fi_pingpong: bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec.
    usec/xfer is one way (time / 2 / iterations)."""
    try:
        with open(path, errors="replace") as f:
            lines = [l.split() for l in f]
    except OSError:
        return None
    for c in lines:
        if len(c) == 8 and FI_SIZE.match(c[0]):
            try:
                lat = float(c[6])
            except ValueError:
                continue
            if lat <= 0:
                continue
            # bandwidth of the ping-pong itself: size bytes each way per lat
            return {"lat": lat, "bw": size / lat * 1e6 / MIB, "mr": float(c[7])}
    return None


def best(old, new, lower):
    if new is None or (isinstance(new, float) and (math.isnan(new) or new <= 0)):
        return old
    if old is None:
        return new
    return min(old, new) if lower else max(old, new)


# The IB extension runs at 8 B (zd_write_imm_lat, zd_atomic_lat -A ...),
# in the order of the extension table's columns.
EXT_TESTS = ("write_imm_lat", "faa_lat", "cas_lat")


class System:
    def __init__(self, key, label, cls, peer=False, floor=False, ext_only=False):
        self.key, self.label, self.cls = key, label, cls
        self.peer, self.floor = peer, floor
        self.ext_only = ext_only    # only in the extension table
        self.write_lat, self.send_lat, self.bw = {}, {}, {}
        self.read_lat = {}
        self.eager_lat, self.eager_mr = {}, {}     # zd_eager_ring, every size
        self.ext = {}               # EXT_TESTS -> best median latency, usec
        self.ext_na = {}            # EXT_TESTS -> why not measured (skipped)
        self.mr8 = None
        self.na = None          # whole system not measured: why
        self.errors = []
        self.write_name = "RDMA write"
        self.send_name = "send/recv"
        self.bw_name = "RDMA write"

    def put(self, field, size, value, lower):
        d = getattr(self, field)
        d[size] = best(d.get(size), value, lower)


def load(raw, sizes, args):
    idx = []
    with open(os.path.join(raw, "index.tsv")) as f:
        for line in f:
            p = line.rstrip("\n").split("\t")
            if len(p) == 7:
                idx.append(p)

    sy = {}

    def add(s):
        sy[s.key] = s
        return s

    fs = add(System("floor-shm", "floor: cache line + memcpy", "shm", floor=True))
    fs.write_name = fs.send_name = "cache-line one-way + size/memcpy"
    fs.bw_name = "memcpy, one core"
    add(System("zdapl-shm-pool", "zdapl-shm, pool buffers", "shm"))
    add(System("zdapl-shm-malloc", "zdapl-shm, malloc buffers", "shm"))
    u = add(System("UCX-shm", "UCX shm (posix,cma,self)", "shm", peer=True))
    u.write_name, u.send_name, u.bw_name = "ucp_put_lat", "tag_lat", "ucp_put_bw"
    l = add(System("libfabric-shm", "libfabric shm (fi_pingpong)", "shm", peer=True))
    l.write_name, l.send_name, l.bw_name = "-", "fi_pingpong msg", "ping-pong (not streamed)"
    ft = add(System("floor-tcp", "floor: loopback TCP", "tcp", floor=True))
    ft.write_name = ft.send_name = "TCP ping-pong"
    ft.bw_name = "TCP stream"
    add(System("zdapl-tcp-pool", "zdapl-tcp, pool buffers", "tcp"))
    add(System("zdapl-tcp-malloc", "zdapl-tcp, malloc buffers", "tcp"))
    add(System("zdapl-mlx5sim-pool", "zdapl-mlx5sim, pool buffers", "mlx5sim", ext_only=True))
    add(System("zdapl-mlx5sim-malloc", "zdapl-mlx5sim, malloc buffers", "mlx5sim", ext_only=True))
    u = add(System("UCX-tcp", "UCX tcp (lo)", "tcp", peer=True))
    u.write_name, u.send_name, u.bw_name = "ucp_put_lat", "tag_lat", "ucp_put_bw"
    l = add(System("libfabric-tcp", "libfabric tcp (fi_pingpong, lo)", "tcp", peer=True))
    l.write_name, l.send_name, l.bw_name = "-", "fi_pingpong msg", "ping-pong (not streamed)"

    # Only complete rounds count: a round the time budget cut short would
    # give some systems one more try than others.
    reps = {p[4] for p in idx if p[4] != "0"}
    cut = {p[4] for p in idx if p[5] == "budget"}
    if cut == reps:         # not even one whole round: keep what there is
        cut = set()
    idx = [p for p in idx if p[4] not in cut]
    args.reps = len(reps - cut)
    floor = {"cacheline": None, "memcpy": {}, "memcpy_mr": {}, "tcp_pp": {}, "tcp_stream": {}}
    reg = {}        # (device class, variant) -> RegCost
    zd_tcp_rc = zd_mlx5sim_rc = None
    budget_cut = bool(cut)
    for system, cls, test, size, rep, rc, path in idx:
        if system == "floor":
            d = read_json(path) if rc == "0" else None
            if not d:
                fs.errors.append("zd_floor exit %s: %s" % (rc, last_error(path + ".txt")))
                continue
            for r in d.get("cacheline_pingpong", []):
                floor["cacheline"] = best(floor["cacheline"], r["t_typical"], True)
            for r in d.get("memcpy", []):
                floor["memcpy"][r["bytes"]] = best(floor["memcpy"].get(r["bytes"]), r["bw_avg"], False)
                floor["memcpy_mr"][r["bytes"]] = best(floor["memcpy_mr"].get(r["bytes"]),
                                                      r["msg_rate_mpps"], False)
            for r in d.get("tcp_pingpong", []):
                floor["tcp_pp"][r["bytes"]] = best(floor["tcp_pp"].get(r["bytes"]), r["t_typical"], True)
            for r in d.get("tcp_stream", []):
                floor["tcp_stream"][r["bytes"]] = best(floor["tcp_stream"].get(r["bytes"]),
                                                       r["bw_avg"], False)
        elif system == "regcost":
            r = reg.setdefault((cls, test), RegCost())
            d = read_json(path) if rc == "0" else None
            if not d:
                r.errors.append("exit %s: %s" % (rc, last_error(path + ".txt")))
                r.rcs.append(rc)
                continue
            for x in d.get("results", []):
                r.put(x["bytes"], x["pair_avg"])
        elif system.startswith("zdapl-"):
            if rep == "0":      # the probes of tcp and mlx5sim
                if test == "write_lat" and system.startswith("zdapl-tcp"):
                    zd_tcp_rc = (rc, last_error(path + ".txt"))
                elif test == "write_lat" and system.startswith("zdapl-mlx5sim"):
                    zd_mlx5sim_rc = (rc, last_error(path + ".txt"))
                continue
            s = sy[system]
            if test in EXT_TESTS and rc == "77":
                # skipped: the provider does not advertise the operation
                s.ext_na[test] = last_error(path + ".txt")
                continue
            d = read_json(path) if rc == "0" else None
            if not d:
                s.errors.append("%s %s B exit %s: %s" % (test, size, rc, last_error(path + ".txt")))
                continue
            for r in d.get("results", []):
                b = r["bytes"]
                if test == "eager_lat":
                    s.put("eager_lat", b, r["t_typical"], True)
                    continue
                if test == "eager_rate":
                    s.put("eager_mr", b, r["msg_rate_mpps"], False)
                    continue
                if test in EXT_TESTS:
                    if b == 8:
                        s.ext[test] = best(s.ext.get(test), r["t_typical"], True)
                    continue
                if b not in sizes:
                    continue
                if test == "write_lat":
                    s.put("write_lat", b, r["t_typical"], True)
                elif test == "send_lat":
                    s.put("send_lat", b, r["t_typical"], True)
                elif test == "read_lat":
                    s.put("read_lat", b, r["t_typical"], True)
                elif test == "write_bw":
                    s.put("bw", b, r["bw_avg"], False)
                    if b == 8:
                        s.mr8 = best(s.mr8, r["msg_rate_mpps"], False)
        elif system == "UCX":
            s = sy["UCX-" + cls]
            v = parse_ucx(path) if rc == "0" else None
            if not v:
                s.errors.append("%s %s B exit %s: %s" % (test, size, rc, last_error(path)))
                continue
            b = int(size)
            if test == "ucp_put_lat":
                s.put("write_lat", b, v["lat"], True)
            elif test == "tag_lat":
                s.put("send_lat", b, v["lat"], True)
            elif test == "ucp_put_bw":
                s.put("bw", b, v["bw"], False)
                if b == 8:
                    s.mr8 = best(s.mr8, v["mr"], False)
        elif system == "libfabric":
            s = sy["libfabric-" + cls]
            b = int(size)
            v = parse_fi(path, b) if rc == "0" else None
            if not v:
                s.errors.append("fi_pingpong %s B exit %s: %s" % (size, rc, last_error(path)))
                continue
            s.put("send_lat", b, v["lat"], True)
            s.put("bw", b, v["bw"], False)
            if b == 8:
                s.mr8 = best(s.mr8, v["mr"], False)

    # zdapl-tcp: one row saying why, while it has no data path.
    if zd_tcp_rc is not None and zd_tcp_rc[0] != "0":
        del sy["zdapl-tcp-malloc"]
        t = sy["zdapl-tcp-pool"]
        t.key, t.label = "zdapl-tcp", "zdapl-tcp"
        t.na = "n/a (no tcp transport yet)"
        t.errors.append("probe zd_write_lat -P zdapl-tcp -s 8 exit %s: %s" % zd_tcp_rc)
        sy = {(k if k != "zdapl-tcp-pool" else "zdapl-tcp"): v for k, v in sy.items()}
    if zd_mlx5sim_rc is not None and zd_mlx5sim_rc[0] != "0":
        m = sy["zdapl-mlx5sim-pool"]
        m.label, m.na = "zdapl-mlx5sim", "n/a (no mlx5sim data path)"
        m.errors.append("probe zd_write_lat -P zdapl-mlx5sim -s 8 exit %s: %s" % zd_mlx5sim_rc)
        sy["zdapl-mlx5sim-malloc"].na = m.na
    # zdapl-tcp runs with pool buffers only: no empty malloc row.
    m = sy.get("zdapl-tcp-malloc")
    if m is not None and not (m.write_lat or m.send_lat or m.bw or m.errors):
        del sy["zdapl-tcp-malloc"]
    if args.no_ucx:
        for c in ("shm", "tcp"):
            sy["UCX-" + c].na = "n/a (ucx_perftest not installed)"
    if args.no_fi:
        for c in ("shm", "tcp"):
            sy["libfabric-" + c].na = "n/a (fi_pingpong not installed)"

    # The floor, per size.
    cl = floor["cacheline"]
    for b in sizes:
        m = floor["memcpy"].get(b)
        if cl is not None and m:
            fs.write_lat[b] = fs.send_lat[b] = cl + b / (m * MIB) * 1e6
        if m:
            fs.bw[b] = m
        t = interp_lin(floor["tcp_pp"], b)
        if t is not None:
            ft.write_lat[b] = ft.send_lat[b] = t
        s = interp_loglog(floor["tcp_stream"], b)
        if s is not None:
            ft.bw[b] = s
    fs.mr8 = floor["memcpy_mr"].get(8)
    return sy, floor, budget_cut, reg


def interp_lin(d, x):
    """d at x; linear in size between measured sizes, none outside."""
    if x in d:
        return d[x]
    ks = sorted(d)
    for a, b in zip(ks, ks[1:]):
        if a < x < b:
            return d[a] + (d[b] - d[a]) * (x - a) / (b - a)
    return None


def interp_loglog(d, x):
    if x in d:
        return d[x]
    ks = sorted(d)
    for a, b in zip(ks, ks[1:]):
        if a < x < b:
            f = (math.log(x) - math.log(a)) / (math.log(b) - math.log(a))
            return math.exp(math.log(d[a]) + f * (math.log(d[b]) - math.log(d[a])))
    return None


# ----------------------------------------------------------------- ratios ---


def ratio(a, b):
    if a is None or b is None or b <= 0:
        return None
    return a / b


def peers_best(sy, cls, field, size, lower):
    vals = []
    for s in sy.values():
        if s.peer and s.cls == cls and s.na is None:
            if field in ("bw", "mr8") and s.key.startswith("libfabric"):
                continue        # a ping-pong is no streaming benchmark
            v = s.mr8 if field == "mr8" else getattr(s, field).get(size)
            if v is not None:
                vals.append((v, s.label))
    if not vals:
        return None, None
    return (min if lower else max)(vals)


def floor_of(sy, cls):
    return sy["floor-" + cls]


def build_rows(sy, sizes):
    rows = []
    for s in sy.values():
        if s.ext_only:
            continue
        if s.na:
            rows.append({"system": s.label, "key": s.key, "class": s.cls, "size": None, "na": s.na})
            continue
        fl = floor_of(sy, s.cls)
        for b in sizes:
            r = {"system": s.label, "key": s.key, "class": s.cls, "size": b}
            for field, lower in (("write_lat", True), ("send_lat", True), ("bw", False)):
                v = getattr(s, field).get(b)
                pb, _ = peers_best(sy, s.cls, field, b, lower)
                r[field] = v
                r[field + "_x_floor"] = ratio(v, getattr(fl, field).get(b))
                r[field + "_x_peer"] = ratio(v, pb)
            if b == 8:
                pb, _ = peers_best(sy, s.cls, "mr8", 8, False)
                r["mr8"] = s.mr8
                r["mr8_x_floor"] = ratio(s.mr8, fl.mr8)
                r["mr8_x_peer"] = ratio(s.mr8, pb)
            rows.append(r)
    return rows


def build_ext_rows(sy):
    """The 8 B write beside write-with-immediate and the atomics, per zdapl
    device: write and write+imm are one-way (ping-pong RTT / 2), an atomic
    is its own round trip (post to completion), so it is set against the
    write's round trip (2x its one-way)."""
    rows = []
    for key in ("zdapl-shm-pool", "zdapl-tcp-pool", "zdapl-tcp", "zdapl-mlx5sim-pool"):
        s = sy.get(key)
        if s is None:
            continue
        r = {"system": s.label, "key": s.key, "na": s.na}
        if s.na:
            rows.append(r)
            continue
        w = s.write_lat.get(8)
        r["write_lat"] = w
        for t in EXT_TESTS:
            r[t] = s.ext.get(t)
            r[t + "_na"] = "n/a (not advertised)" if t in s.ext_na and r[t] is None else None
            ref = w if t == "write_imm_lat" else (2 * w if w is not None else None)
            r[t + "_x_write"] = ratio(r[t], ref)
        rows.append(r)
    return rows


# -------------------------------------------------- consumer memory (13) ---

# Issue 13: on each device, malloc'd buffers (what consumers register)
# against zdapl's pool, same run. (measure, field, size, kind, bound):
# 'le' malloc / pool <= bound (latency), 'ge' >= bound (bandwidth, rate);
# no bound: shown, no goal.
CONSUMER_DEVICES = ("shm", "mlx5sim")
CONSUMER_MEASURES = (
    ("write lat us", "write_lat", 8, "le", 1.2),
    ("write BW MB/s", "bw", 1048576, "ge", 0.9),
    ("send lat us", "send_lat", 8, "le", 1.2),
    ("read lat us", "read_lat", 8, "le", 1.2),
    ("eager ring lat us", "eager_lat", 8, None, None),
    ("eager ring Mmsg/s", "eager_mr", 8, None, None),
)
CONSUMER_NAMES = {"write_lat": "RDMA-write latency", "bw": "RDMA-write bandwidth",
                  "send_lat": "send/recv latency", "read_lat": "RDMA-read latency"}


def consumer_pair(sy, dev):
    return sy.get("zdapl-%s-pool" % dev), sy.get("zdapl-%s-malloc" % dev)


def build_consumer_rows(sy):
    rows = []
    for dev in CONSUMER_DEVICES:
        pool, mal = consumer_pair(sy, dev)
        if pool is None or mal is None:
            continue
        na = pool.na or mal.na
        for measure, field, size, kind, bound in CONSUMER_MEASURES:
            r = {"device": "zdapl-" + dev, "measure": measure, "field": field, "size": size,
                 "kind": kind, "bound": bound, "na": na}
            if not na:
                r["pool"] = getattr(pool, field).get(size)
                r["malloc"] = getattr(mal, field).get(size)
                r["ratio"] = ratio(r["malloc"], r["pool"])
                if bound is None:
                    r["status"] = "-"
                elif r["ratio"] is None:
                    r["status"] = "not measured"
                else:
                    ok = r["ratio"] <= bound if kind == "le" else r["ratio"] >= bound
                    r["status"] = "met" if ok else "missed"
            rows.append(r)
    return rows


def consumer_goals(rows):
    """The bounded rows of the consumer table as goals entries."""
    out = []
    for r in rows:
        if r["bound"] is None:
            continue
        unit = " MB/s" if r["field"] == "bw" else " us"
        goal = "%s %s %s, malloc'd buffers %s %.1fx pool buffers (same run)" % (
            r["device"], re.sub(r"^(\d+)([KM]?)$", lambda m: m.group(1) + " " + m.group(2) +
                                ("iB" if m.group(2) else "B"), size_label(r["size"])),
            CONSUMER_NAMES[r["field"]], "<=" if r["kind"] == "le" else ">=", r["bound"])
        e = {"goal": goal, "issue": 13, "kind": r["kind"], "bound": r["bound"],
             "value": r.get("malloc"), "reference": r.get("pool")}
        if r["na"]:
            e["status"], e["text"] = "not measured", "not measured (%s)" % r["na"]
        elif r.get("ratio") is None:
            e["status"] = "not measured"
            e["text"] = "not measured (no %s figure)" % ("malloc" if r.get("malloc") is None else "pool")
        else:
            rr = r["ratio"]
            e["ratio"], e["status"] = rr, r["status"]
            fmt = "%.0f" if r["field"] == "bw" else "%.3g"
            detail = ("malloc " + fmt + "%s vs pool " + fmt + "%s = %.2fx (bound %.2fx)") % (
                r["malloc"], unit, r["pool"], unit, rr, r["bound"])
            if r["status"] == "met":
                e["text"] = "met: " + detail
            else:
                by = (rr / r["bound"] - 1) * 100 if r["kind"] == "le" else (1 - rr / r["bound"]) * 100
                e["text"] = "missed by %.0f%%: %s" % (by, detail)
        out.append(e)
    return out


def build_eager_rows(sy):
    """zd_eager_ring per device and size: ping-pong latency and streamed
    message rate, pool beside malloc."""
    rows = []
    for dev in CONSUMER_DEVICES:
        pool, mal = consumer_pair(sy, dev)
        if pool is None or mal is None:
            continue
        if pool.na or mal.na:
            rows.append({"device": "zdapl-" + dev, "size": None, "na": pool.na or mal.na})
            continue
        sizes = sorted(set(pool.eager_lat) | set(mal.eager_lat) | set(pool.eager_mr) | set(mal.eager_mr))
        for b in sizes:
            r = {"device": "zdapl-" + dev, "size": b, "na": None,
                 "lat_pool": pool.eager_lat.get(b), "lat_malloc": mal.eager_lat.get(b),
                 "mr_pool": pool.eager_mr.get(b), "mr_malloc": mal.eager_mr.get(b)}
            r["lat_ratio"] = ratio(r["lat_malloc"], r["lat_pool"])
            r["mr_ratio"] = ratio(r["mr_malloc"], r["mr_pool"])
            rows.append(r)
    return rows


# ----------------------------------------------- registration cost (13) ---

class RegCost:
    """zd_reg_cost's runs of one device and memory: the best (lowest)
    average create+free pair per size over the rounds, usec."""

    def __init__(self):
        self.pair = {}
        self.errors = []
        self.rcs = []       # exit statuses of the runs that gave nothing

    def put(self, size, value):
        self.pair[size] = best(self.pair.get(size), value, True)


# (variant, the memory column): zd_reg_cost --mem malloc, --mem pool, and
# --mem malloc with ZDAPL_MEM_ADOPT=0 (the cross-memory-attach path).
REG_VARIANTS = (("malloc", "malloc (adopted)"), ("pool", "pool"),
                ("noadopt", "malloc, ZDAPL_MEM_ADOPT=0"))


def build_reg_rows(reg):
    rows = []
    for dev in CONSUMER_DEVICES:
        for v, label in REG_VARIANTS:
            r = reg.get((dev, v))
            if r is None:
                continue
            row = {"device": "zdapl-" + dev, "variant": v, "memory": label,
                   "na": None, "errors": r.errors}
            if not r.pair:
                row["na"] = "n/a (%s)" % ("exit " + r.rcs[0] if r.rcs else "no run")
            else:
                p4k, p1m, p16m = (r.pair.get(b) for b in (4096, 1 << 20, 16 << 20))
                row["pair_4k_us"] = p4k
                row["per_mib_1m_us"] = p1m
                row["per_mib_16m_us"] = p16m / 16 if p16m is not None else None
            rows.append(row)
    return rows


# ------------------------------------------------------------------ goals ---


def goals(sy):
    out = []
    z = sy.get("zdapl-shm-pool")
    zm = sy.get("zdapl-shm-malloc")
    fs, ft = sy["floor-shm"], sy["floor-tcp"]
    ucx, ucxt, fit = sy["UCX-shm"], sy["UCX-tcp"], sy["libfabric-tcp"]

    def g(text, value, ref, kind, bound=1.0, unit="", malloc=None):
        """kind 'le': value/ref <= bound; 'lt': value < ref; 'ge': value/ref >=
        bound; 'gt': value > ref."""
        e = {"goal": text, "value": value, "reference": ref, "kind": kind, "bound": bound}
        if value is None or ref is None:
            e["status"] = "not measured"
            e["text"] = "not measured (%s)" % ("no zdapl figure" if value is None else "no reference figure")
        else:
            r = value / ref
            e["ratio"] = r
            if kind == "le":
                ok, by = r <= bound, (r / bound - 1) * 100
                detail = "%.3g%s = %.2fx (bound %.2fx)" % (value, unit, r, bound)
            elif kind == "ge":
                ok, by = r >= bound, (1 - r / bound) * 100
                detail = "%.0f%s = %.2fx (bound %.2fx)" % (value, unit, r, bound)
            elif kind == "lt":
                ok, by = value < ref, (r - 1) * 100
                detail = "%.3g%s vs %.3g%s = %.2fx" % (value, unit, ref, unit, r)
            else:   # gt
                ok, by = value > ref, (1 - r) * 100
                detail = "%.4g%s vs %.4g%s = %.2fx" % (value, unit, ref, unit, r) if value < 1000 else \
                    "%.0f%s vs %.0f%s = %.2fx" % (value, unit, ref, unit, r)
            e["status"] = "met" if ok else "missed"
            e["text"] = ("met: " + detail) if ok else ("missed by %.0f%%: %s" % (by, detail))
        if malloc is not None and value is not None and ref is not None:
            e["malloc"] = malloc
            e["text"] += "; malloc buffers: %s%s (%.2fx)" % (
                "%.0f" % malloc if malloc >= 1000 else "%.3g" % malloc, unit, malloc / ref)
        out.append(e)

    def zv(s, field, size):
        if s is None or s.na:
            return None
        return s.mr8 if field == "mr8" else getattr(s, field).get(size)

    g("zdapl-shm 8 B RDMA-write latency <= 1.05x floor (cache-line one-way)",
      zv(z, "write_lat", 8), fs.write_lat.get(8), "le", 1.05, " us", zv(zm, "write_lat", 8))
    g("zdapl-shm 8 B RDMA-write latency below UCX shm put (ucp_put_lat)",
      zv(z, "write_lat", 8), zv(ucx, "write_lat", 8), "lt", 1.0, " us", zv(zm, "write_lat", 8))
    g("zdapl-shm 8 B send/recv latency <= 1.25x floor",
      zv(z, "send_lat", 8), fs.send_lat.get(8), "le", 1.25, " us", zv(zm, "send_lat", 8))
    g("zdapl-shm 1 MiB RDMA-write bandwidth >= 1.0x memcpy (1 MiB)",
      zv(z, "bw", 1048576), fs.bw.get(1048576), "ge", 1.0, " MB/s", zv(zm, "bw", 1048576))
    g("zdapl-shm 1 MiB RDMA-write bandwidth above UCX shm put (ucp_put_bw)",
      zv(z, "bw", 1048576), zv(ucx, "bw", 1048576), "gt", 1.0, " MB/s", zv(zm, "bw", 1048576))
    g("zdapl-shm 8 B RDMA-write message rate above UCX shm put message rate",
      zv(z, "mr8", 8), zv(ucx, "mr8", 8), "gt", 1.0, " Mmsg/s", zv(zm, "mr8", 8))
    zt = sy.get("zdapl-tcp-pool") or sy.get("zdapl-tcp")
    if zt is not None and zt.na:
        for t in ("<= 1.15x raw TCP ping-pong", "below libfabric tcp", "below UCX tcp"):
            out.append({"goal": "zdapl-tcp 8 B latency " + t, "status": "not measured",
                        "text": "missed: " + zt.na})
    else:
        zl = zv(zt, "send_lat", 8)
        g("zdapl-tcp 8 B send/recv latency <= 1.15x raw TCP ping-pong",
          zl, ft.send_lat.get(8), "le", 1.15, " us")
        g("zdapl-tcp 8 B send/recv latency below libfabric tcp",
          zl, zv(fit, "send_lat", 8), "lt", 1.0, " us")
        g("zdapl-tcp 8 B send/recv latency below UCX tcp (tag_lat)",
          zl, zv(ucxt, "send_lat", 8), "lt", 1.0, " us")
    return out


# ------------------------------------------------------------- formatting ---


def fnum(v, kind):
    if v is None:
        return "-"
    if kind == "lat":
        return "%.3f" % v if v < 10 else ("%.2f" % v if v < 100 else "%.1f" % v)
    if kind == "bw":
        return "%.1f" % v if v < 100 else "%.0f" % v
    if kind == "mr":
        return "%.2f" % v if v < 100 else "%.0f" % v
    if kind == "mr3":       # message rates well below 1 Mmsg/s
        return "%.3f" % v if v < 100 else "%.0f" % v
    return "%.2f" % v      # ratio


HEAD = ["system", "size", "write lat us", "x floor", "x peer",
        "send lat us", "x floor", "x peer", "BW MB/s", "x floor", "x peer",
        "8 B Mmsg/s", "x floor", "x peer"]


def table(rows):
    lines = ["| " + " | ".join(HEAD) + " |",
             "|" + "|".join("---" if i < 1 else "---:" for i in range(len(HEAD))) + "|"]
    for r in rows:
        if r["size"] is None:
            cells = [r["system"], "all", r["na"]] + ["-"] * (len(HEAD) - 3)
        else:
            cells = [r["system"], size_label(r["size"])]
            for f, k in (("write_lat", "lat"), ("send_lat", "lat"), ("bw", "bw")):
                cells += [fnum(r[f], k), fnum(r[f + "_x_floor"], "x"), fnum(r[f + "_x_peer"], "x")]
            if r["size"] == 8:
                cells += [fnum(r["mr8"], "mr"), fnum(r["mr8_x_floor"], "x"), fnum(r["mr8_x_peer"], "x")]
            else:
                cells += ["", "", ""]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


CONS_HEAD = ["device", "measure", "size", "pool", "malloc", "malloc / pool", "goal", "status"]


def consumer_table(rows):
    lines = ["| " + " | ".join(CONS_HEAD) + " |",
             "|" + "|".join("---" if i < 2 else "---:" for i in range(len(CONS_HEAD))) + "|"]
    for r in rows:
        kind = "bw" if r["field"] == "bw" else "mr3" if r["field"] == "eager_mr" else "lat"
        goal = "-" if r["bound"] is None else "%s %.1fx" % ("<=" if r["kind"] == "le" else ">=", r["bound"])
        if r["na"]:
            cells = [r["device"], r["measure"], size_label(r["size"]), r["na"], "-", "-", goal, "not measured"]
        else:
            cells = [r["device"], r["measure"], size_label(r["size"]), fnum(r["pool"], kind),
                     fnum(r["malloc"], kind), fnum(r["ratio"], "x"), goal, r["status"]]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


EAGER_HEAD = ["device", "size", "lat pool us", "lat malloc us", "malloc / pool",
              "Mmsg/s pool", "Mmsg/s malloc", "malloc / pool"]


def eager_table(rows):
    lines = ["| " + " | ".join(EAGER_HEAD) + " |",
             "|" + "|".join("---" if i < 1 else "---:" for i in range(len(EAGER_HEAD))) + "|"]
    for r in rows:
        if r["na"]:
            cells = [r["device"], "all", r["na"]] + ["-"] * (len(EAGER_HEAD) - 3)
        else:
            cells = [r["device"], size_label(r["size"]), fnum(r["lat_pool"], "lat"),
                     fnum(r["lat_malloc"], "lat"), fnum(r["lat_ratio"], "x"),
                     fnum(r["mr_pool"], "mr3"), fnum(r["mr_malloc"], "mr3"), fnum(r["mr_ratio"], "x")]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


REG_HEAD = ["device", "memory", "4 KiB us / pair", "1 MiB us / MiB", "16 MiB us / MiB"]


def reg_table(rows):
    lines = ["| " + " | ".join(REG_HEAD) + " |",
             "|" + "|".join("---" if i < 2 else "---:" for i in range(len(REG_HEAD))) + "|"]
    for r in rows:
        if r["na"]:
            cells = [r["device"], r["memory"], r["na"], "-", "-"]
        else:
            cells = [r["device"], r["memory"], fnum(r["pair_4k_us"], "lat"),
                     fnum(r["per_mib_1m_us"], "lat"), fnum(r["per_mib_16m_us"], "lat")]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


EXT_HEAD = ["system", "write lat us", "write+imm lat us", "x write",
            "FAA us", "x write RTT", "CAS us", "x write RTT"]


def ext_table(rows):
    lines = ["| " + " | ".join(EXT_HEAD) + " |",
             "|" + "|".join("---" if i < 1 else "---:" for i in range(len(EXT_HEAD))) + "|"]
    for r in rows:
        if r["na"]:
            cells = [r["system"], r["na"]] + ["-"] * (len(EXT_HEAD) - 2)
        else:
            cells = [r["system"], fnum(r["write_lat"], "lat")]
            for t in EXT_TESTS:
                if r[t + "_na"]:
                    cells += [r[t + "_na"], "-"]
                else:
                    cells += [fnum(r[t], "lat"), fnum(r[t + "_x_write"], "x")]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def tool_version(cmd, pat):
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return "?"
    m = re.search(pat, out)
    return m.group(1) if m else "?"


def git_rev(root):
    try:
        out = subprocess.run(["git", "-C", root, "describe", "--always", "--dirty"],
                             capture_output=True, text=True, timeout=10).stdout.strip()
        return out or "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


def report(sy, floor, rows, ext_rows, gl, args, budget_cut, cons_rows, eager_rows, gl13,
           reg_rows):
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    host = platform.node()
    try:
        load = open("/proc/loadavg").read().split()[:3]
    except OSError:
        load = ["?"] * 3
    cpu = "?"
    try:
        for l in open("/proc/cpuinfo"):
            if l.startswith("model name"):
                cpu = l.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    meta = {
        "date": now, "host": host, "cpu": cpu, "cpus": os.cpu_count(),
        "kernel": platform.release(), "loadavg_at_end": load,
        "zdapl": git_rev(root),
        "ucx": tool_version(["ucx_info", "-v"], r"Version (\S+)") if not args.no_ucx else "not installed",
        "libfabric": tool_version(["fi_info", "--version"], r"libfabric: (\S+)") if not args.no_fi else "not installed",
        "reps": args.reps, "quick": args.quick, "seconds": args.seconds,
    }
    L = []
    L.append("# zdapl beside UCX, libfabric and this machine's floor")
    L.append("")
    L.append("%s, host `%s` (%s, %s CPUs, Linux %s), zdapl %s, UCX %s, libfabric %s." % (
        now, host, cpu, meta["cpus"], meta["kernel"], meta["zdapl"], meta["ucx"], meta["libfabric"]))
    L.append("All ratios come from this one run (%s%d interleaved repetition%s, best of them kept: "
             "lowest median latency, highest bandwidth; %ss). Other jobs share this host "
             "(load average %s at the end): the numbers are noisy." % (
                 "quick mode, " if args.quick else "", args.reps,
                 "s" if args.reps > 1 else "", args.seconds, " ".join(load)))
    if budget_cut:
        L.append("**The time budget cut a round short: only the %d complete round(s) are used.**" % args.reps)
    L.append("")
    L += table(rows)
    L.append("")
    L.append("Columns: latency is one-way (round trip / 2), the median (fi_pingpong prints only the "
             "mean), in usec; *write lat* is "
             "RDMA write (zd_write_lat) or put (ucp_put_lat), *send lat* is send/recv "
             "(zd_send_lat, UCX tag_lat, fi_pingpong); BW in MB/s = 2^20 B/s "
             "(zd_write_bw and ucp_put_bw: streamed, many in flight; libfabric: the ping-pong's "
             "own bytes/time, as Debian ships no fi_rma_bw); message rate at 8 B in millions/s "
             "(the 8 B zd_write_bw and ucp_put_bw runs; libfabric: ping-pong transfers/s, left out of x peer for BW and rate). Peer runs are not pinned to CPUs, like zdapl's --loopback runs; zd_floor pins CPUs 0 and 1.")
    cl = floor["cacheline"]
    L.append("Floor: shm class latency = cache-line one-way (%s us) + size / memcpy bandwidth at that "
             "size; shm bandwidth and message rate = single-core memcpy; tcp class latency = loopback "
             "TCP ping-pong (1 MiB interpolated between 256 KiB and 2 MiB), tcp bandwidth = loopback "
             "TCP stream (measured at 4K, 64K, 1M; log-interpolated between, none below 4 KiB); "
             "no tcp message-rate floor. x floor = system / floor; x peer = system / best of UCX "
             "and libfabric in the same class (lowest latency, highest streamed bandwidth); "
             "latency ratios < 1 and bandwidth ratios > 1 are better." % fnum(cl, "lat"))
    L.append("")
    L.append("## IB extensions at 8 B, beside the plain RDMA write")
    L.append("")
    L += ext_table(ext_rows)
    L.append("")
    L.append("Same run, pool buffers, median in usec. *write* is zd_write_lat and *write+imm* "
             "zd_write_imm_lat (ib_write_lat --write_with_imm: each side waits for the receive "
             "the immediate consumed): one-way, round trip / 2. *FAA* and *CAS* are "
             "zd_atomic_lat -A FETCH_AND_ADD / CMP_AND_SWAP (ib_atomic_lat): post to completion "
             "of one atomic, a whole round trip, so x write RTT sets them against 2x the write's "
             "one-way latency. n/a (not advertised): the device does not offer the operation "
             "(dat_ia_query's provider attributes), the benchmark skipped.")
    L.append("")
    L.append("## Consumer memory (issue 13): malloc'd beside pool buffers")
    L.append("")
    L += consumer_table(cons_rows)
    L.append("")
    L.append("Same run. *malloc* buffers are page-aligned heap memory (`--mem malloc`, the "
             "benchmarks' default: what consumers register with dat_lmr_create), *pool* buffers "
             "zdapl_mem_alloc's (`--mem pool`). Latency: median one-way (write, send: round trip "
             "/ 2; read: post to completion), usec; BW: zd_write_bw, MB/s = 2^20 B/s; eager ring: "
             "zd_eager_ring at 8 B (below). malloc / pool: latency ratios <= bound and bandwidth "
             "ratios >= bound meet issue 13's goals.")
    L.append("")
    L.append("### zd_eager_ring: an MPI eager ring, malloc'd beside pool buffers")
    L.append("")
    L += eager_table(eager_rows)
    L.append("")
    L.append("Same run. Each side's ring of 64 slots in one registered buffer; a message is one "
             "RDMA write of the payload and the 8-byte header word that closes its slot, which "
             "the receiver polls; credits written back every 32 messages. *lat*: --mode pingpong, "
             "median one-way (round trip / 2), usec; *Mmsg/s*: --mode stream, messages per "
             "second from the first post to the credit for the last, in millions.")
    L.append("")
    L.append("### Registration cost (issue 13)")
    L.append("")
    L += reg_table(reg_rows)
    L.append("")
    L.append("Same run. zd_reg_cost: dat_lmr_create(DAT_MEM_TYPE_VIRTUAL) + dat_lmr_free of one "
             "page-aligned buffer whose every page was touched, one LMR at a time, pairs "
             "repeated for %s s a size (at least 3); the average pair, usec (per MiB: divided "
             "by the size in MiB), best of the rounds. *malloc (adopted)*: the pair re-backs "
             "the buffer's whole pages with the shared adoption file and gives them back; "
             "*ZDAPL_MEM_ADOPT=0*: the same memory left to cross-memory attach; *pool*: "
             "zdapl_mem_alloc's, registered already. (`zd_reg_cost` alone also times a "
             "second LMR over a range another holds: no copy.)" % args.reg_time)
    errs = [(s.label, e) for s in sy.values() for e in s.errors]
    errs += [("zd_reg_cost %s, %s" % (r["device"], r["memory"]), e)
             for r in reg_rows for e in r["errors"]]
    if errs:
        L.append("")
        L.append("Runs that failed or were not possible (their cells are '-' or n/a):")
        for lab, e in errs[:20]:
            L.append("- %s: %s" % (lab, e))
        if len(errs) > 20:
            L.append("- ... and %d more" % (len(errs) - 20))
    L.append("")
    L.append("## Goals (issue 4), zdapl-shm with pool buffers")
    L.append("")
    for e in gl:
        L.append("- %s: **%s**" % (e["goal"], e["text"]))
    L.append("")
    L.append("## Goals (issue 13), malloc'd buffers against pool buffers")
    L.append("")
    for e in gl13:
        L.append("- %s: **%s**" % (e["goal"], e["text"]))
    L.append("")
    if args.png:
        L.append("Plot: `%s`" % args.png)
    return "\n".join(L) + "\n", meta


# ------------------------------------------------------------------- plot ---


def plot(sy, floor, args, sizes):
    if not shutil.which("gnuplot"):
        print("compare: gnuplot not installed, no PNG", file=sys.stderr)
        return False
    d = os.path.join(os.path.dirname(os.path.abspath(args.png)), "plot")
    os.makedirs(d, exist_ok=True)

    def dat(name, pts):
        pts = sorted((k, v) for k, v in pts.items() if v is not None and v > 0)
        if not pts:
            return None
        p = os.path.join(d, name + ".dat")
        with open(p, "w") as f:
            for k, v in pts:
                f.write("%d %.6g\n" % (k, v))
        return p

    xmax = int(max(sizes) * 1.4)
    cl = floor["cacheline"]
    mem = {k: v for k, v in floor["memcpy"].items() if k <= xmax}
    lat_floor = {k: cl + k / (v * MIB) * 1e6 for k, v in mem.items()} if cl else {}
    tcp_pp = {k: v for k, v in floor["tcp_pp"].items() if k <= xmax}
    tcp_pp.update(sy["floor-tcp"].send_lat)     # with the interpolated sizes

    def get(key, field):
        s = sy.get(key)
        if s is None or s.na:
            return {}
        return getattr(s, field)

    # (file, title, color, dash, width, point type)
    lat = [
        (dat("lat_floor_shm", lat_floor), "floor shm: cache line + memcpy", "#000000", 2, 2, 0),
        (dat("lat_zd_pool_w", get("zdapl-shm-pool", "write_lat")), "zdapl-shm pool: RDMA write", "#0050d0", 1, 3, 7),
        (dat("lat_zd_pool_s", get("zdapl-shm-pool", "send_lat")), "zdapl-shm pool: send/recv", "#0050d0", 3, 2, 5),
        (dat("lat_zd_mal_w", get("zdapl-shm-malloc", "write_lat")), "zdapl-shm malloc: RDMA write", "#60b0ff", 1, 2, 9),
        (dat("lat_ucx_w", get("UCX-shm", "write_lat")), "UCX shm: put", "#d00000", 1, 2, 7),
        (dat("lat_ucx_s", get("UCX-shm", "send_lat")), "UCX shm: tag send/recv", "#d00000", 3, 2, 5),
        (dat("lat_fi_s", get("libfabric-shm", "send_lat")), "libfabric shm: pingpong", "#008000", 1, 2, 13),
        (dat("lat_floor_tcp", tcp_pp), "floor tcp: TCP ping-pong", "#777777", 2, 2, 0),
        (dat("lat_zdt_s", get("zdapl-tcp-pool", "send_lat")), "zdapl-tcp pool: send/recv", "#7000a0", 1, 2, 7),
        (dat("lat_ucxt_w", get("UCX-tcp", "write_lat")), "UCX tcp: put", "#ff8c00", 1, 2, 7),
        (dat("lat_ucxt_s", get("UCX-tcp", "send_lat")), "UCX tcp: tag send/recv", "#ff8c00", 3, 2, 5),
        (dat("lat_fit_s", get("libfabric-tcp", "send_lat")), "libfabric tcp: pingpong", "#00a0a0", 1, 2, 13),
    ]
    stream = {k: v for k, v in floor["tcp_stream"].items()}
    bw = [
        (dat("bw_floor_shm", mem), "floor: memcpy, one core", "#000000", 2, 2, 0),
        (dat("bw_zd_pool", get("zdapl-shm-pool", "bw")), "zdapl-shm pool: RDMA write", "#0050d0", 1, 3, 7),
        (dat("bw_zd_mal", get("zdapl-shm-malloc", "bw")), "zdapl-shm malloc: RDMA write", "#60b0ff", 1, 2, 9),
        (dat("bw_ucx", get("UCX-shm", "bw")), "UCX shm: put", "#d00000", 1, 2, 7),
        (dat("bw_fi", get("libfabric-shm", "bw")), "libfabric shm: ping-pong BW", "#008000", 3, 2, 13),
        (dat("bw_floor_tcp", stream), "floor: TCP stream", "#777777", 2, 2, 0),
        (dat("bw_zdt", get("zdapl-tcp-pool", "bw")), "zdapl-tcp pool: RDMA write", "#7000a0", 1, 2, 7),
        (dat("bw_ucxt", get("UCX-tcp", "bw")), "UCX tcp: put", "#ff8c00", 1, 2, 7),
        (dat("bw_fit", get("libfabric-tcp", "bw")), "libfabric tcp: ping-pong BW", "#00a0a0", 3, 2, 13),
    ]

    def plots(series):
        parts = []
        for p, title, color, dash, width, pt in series:
            if p is None:
                continue
            style = "lines" if pt == 0 else "linespoints pt %d ps 1.1" % pt
            parts.append("'%s' using 1:2 with %s lw %d dt %d lc rgb '%s' title '%s'" % (
                p, style, width, dash, color, title))
        return ", \\\n  ".join(parts) if parts else "NaN notitle"

    ticks = ", ".join("'%s' %d" % (size_label(s), s) for s in
                      (2 ** i for i in range(3, 22)) if s <= xmax and (s == 8 or math.log2(s) % 3 == 0 or s == max(sizes)))
    gp = os.path.join(d, "compare.gp")
    title = "zdapl vs UCX, libfabric and the floor (%s, one run, noisy shared host)" % (
        datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))
    with open(gp, "w") as f:
        f.write("""set terminal pngcairo size 1800,1000 enhanced font 'DejaVu Sans,12'
set output '%(png)s'
set multiplot layout 1,2 title '%(title)s' font ',14'
set logscale xy
set xrange [6:%(xmax)d]
set bmargin 12
set xtics (%(ticks)s)
set grid xtics ytics mytics lc rgb '#dddddd'
set xlabel 'message size (bytes)'
set key outside center bottom horizontal maxcols 2 font ',11' samplen 3 spacing 1.1 width 2
set title 'one-way latency (median), lower is better'
set ylabel 'usec'
set format y '%%.10g'
plot %(lat)s
set title 'bandwidth, higher is better'
set ylabel 'MB/s (2^{20} B/s)'
plot %(bw)s
unset multiplot
""" % {"png": os.path.abspath(args.png), "title": title, "xmax": xmax, "ticks": ticks,
            "lat": plots(lat), "bw": plots(bw)})
    try:
        r = subprocess.run(["gnuplot", gp], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        print("compare: gnuplot failed: %s" % e, file=sys.stderr)
        return False
    if r.returncode != 0:
        print("compare: gnuplot failed:\n" + r.stderr, file=sys.stderr)
        return False
    return True


# ------------------------------------------------------------------ check ---


def check(path):
    """The table parses: one header, every row as many cells, numbers where
    numbers belong, the systems and the goals block present."""
    try:
        text = open(path).read()
    except OSError as e:
        print("check: %s" % e)
        return 1
    lines = text.splitlines()
    try:
        h = next(i for i, l in enumerate(lines) if l.startswith("| system |"))
    except StopIteration:
        print("check: no table header")
        return 1
    head = [c.strip() for c in lines[h].strip("|").split("|")]
    if head != HEAD:
        print("check: unexpected header %r" % head)
        return 1
    if not re.match(r"^\|(-+:?\|)+$", lines[h + 1]):
        print("check: no separator row")
        return 1
    rows, systems, numbers = 0, set(), 0
    for l in lines[h + 2:]:
        if not l.startswith("|"):
            break
        cells = [c.strip() for c in l.strip().strip("|").split("|")]
        if len(cells) != len(HEAD):
            print("check: row with %d cells, want %d: %s" % (len(cells), len(HEAD), l))
            return 1
        systems.add(cells[0])
        rows += 1
        if cells[1] == "all":
            if not cells[2].startswith("n/a"):
                print("check: an 'all' row must say n/a: %s" % l)
                return 1
            continue
        if not re.match(r"^\d+[KM]?$", cells[1]):
            print("check: bad size %r" % cells[1])
            return 1
        for c in cells[2:]:
            if c in ("", "-"):
                continue
            try:
                float(c)
                numbers += 1
            except ValueError:
                print("check: not a number: %r in %s" % (c, l))
                return 1
    want = ["floor: cache line + memcpy", "zdapl-shm, pool buffers", "zdapl-shm, malloc buffers",
            "floor: loopback TCP"]
    for w in want:
        if w not in systems:
            print("check: system %r missing" % w)
            return 1
    if not any(s.startswith("UCX") for s in systems) or not any(s.startswith("libfabric") for s in systems):
        print("check: a peer is missing")
        return 1
    if numbers < 20:
        print("check: only %d numbers in the table" % numbers)
        return 1
    n_ext = check_ext(lines)
    if n_ext is None:
        return 1
    n_cons = check_table(lines, CONS_HEAD, "consumer memory", 4)
    n_eager = check_table(lines, EAGER_HEAD, "eager ring", 1)
    n_reg = check_table(lines, REG_HEAD, "registration cost", 3)
    if n_cons is None or n_eager is None or n_reg is None:
        return 1
    try:
        gi = next(i for i, l in enumerate(lines) if l.startswith("## Goals"))
    except StopIteration:
        print("check: no goals block")
        return 1
    g = [l for l in lines[gi:] if l.startswith("- zdapl-")]
    if len(g) < 7 + 8 or not all(re.search(r"\*\*(met|missed|not measured)", l) for l in g):
        print("check: goals block incomplete")
        return 1
    print("check: %s: %d rows, %d systems, %d numbers, %d goals, %d extension rows, "
          "%d consumer-memory rows, %d eager-ring rows, %d registration-cost rows" % (
              path, rows, len(systems), numbers, len(g), n_ext, n_cons, n_eager, n_reg))
    return 0


def check_table(lines, head, name, min_shm):
    """A table after its header: every row as many cells, numbers, '-',
    or n/a with a reason (and met/missed/not measured in a status column);
    at least @min_shm zdapl-shm rows with a number. Its row count, or None."""
    hl = "| " + " | ".join(head) + " |"
    try:
        h = lines.index(hl)
    except ValueError:
        print("check: no %s table" % name)
        return None
    n, shm = 0, 0
    for l in lines[h + 2:]:
        if not l.startswith("|"):
            break
        cells = [c.strip() for c in l.strip().strip("|").split("|")]
        if len(cells) != len(head):
            print("check: %s row with %d cells, want %d: %s" % (name, len(cells), len(head), l))
            return None
        numbers = 0
        for c, hd in zip(cells, head):
            if hd in ("device", "measure", "goal", "memory", "size") or c in ("", "-") or \
                    c.startswith("n/a"):
                continue
            if hd == "status":
                if c not in ("met", "missed", "not measured"):
                    print("check: %s status %r: %s" % (name, c, l))
                    return None
                continue
            try:
                float(c)
                numbers += 1
            except ValueError:
                print("check: not a number: %r in %s" % (c, l))
                return None
        if cells[0] == "zdapl-shm" and numbers:
            shm += 1
        n += 1
    if shm < min_shm:
        print("check: %d zdapl-shm rows with numbers in the %s table, want %d" % (shm, name, min_shm))
        return None
    return n


def check_ext(lines):
    """The extension table: its header, then rows of numbers, '-' or n/a
    with a reason; zdapl-shm's among them. Its row count, or None."""
    try:
        h = next(i for i, l in enumerate(lines) if l.startswith("| system | write lat us | write+imm"))
    except StopIteration:
        print("check: no IB extension table")
        return None
    head = [c.strip() for c in lines[h].strip("|").split("|")]
    if head != EXT_HEAD:
        print("check: unexpected extension header %r" % head)
        return None
    n, shm = 0, False
    for l in lines[h + 2:]:
        if not l.startswith("|"):
            break
        cells = [c.strip() for c in l.strip().strip("|").split("|")]
        if len(cells) != len(EXT_HEAD):
            print("check: extension row with %d cells, want %d: %s" % (len(cells), len(EXT_HEAD), l))
            return None
        shm = shm or cells[0].startswith("zdapl-shm")
        for c in cells[1:]:
            if c in ("", "-") or c.startswith("n/a"):
                continue
            try:
                float(c)
            except ValueError:
                print("check: not a number: %r in %s" % (c, l))
                return None
        n += 1
    if not shm:
        print("check: no zdapl-shm row in the extension table")
        return None
    return n


# ------------------------------------------------------------------- main ---


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", metavar="FILE.md")
    ap.add_argument("--raw")
    ap.add_argument("--out")
    ap.add_argument("--json")
    ap.add_argument("--png")
    ap.add_argument("--sizes", default="8 64 512 4096 32768 262144 1048576")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--seconds", type=int, default=0)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--reg-time", default="0.05", help="zd_reg_cost --time of the runs")
    ap.add_argument("--no-ucx", action="store_true")
    ap.add_argument("--no-fi", action="store_true")
    args = ap.parse_args()
    if args.check:
        return check(args.check)
    if not args.raw or not args.out:
        ap.error("--raw and --out are needed")
    sizes = [int(s) for s in args.sizes.split()]
    sy, floor, cut, reg = load(args.raw, sizes, args)
    rows = build_rows(sy, sizes)
    ext_rows = build_ext_rows(sy)
    gl = goals(sy)
    cons_rows = build_consumer_rows(sy)
    eager_rows = build_eager_rows(sy)
    gl13 = consumer_goals(cons_rows)
    png_ok = plot(sy, floor, args, sizes) if args.png else False
    if not png_ok:
        args.png = None
    reg_rows = build_reg_rows(reg)
    text, meta = report(sy, floor, rows, ext_rows, gl, args, cut, cons_rows, eager_rows, gl13,
                        reg_rows)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "sizes": sizes,
                       "floor": {"cacheline_oneway_us": floor["cacheline"],
                                 "memcpy_mbs": floor["memcpy"], "memcpy_mmsgs": floor["memcpy_mr"],
                                 "tcp_pingpong_us": floor["tcp_pp"], "tcp_stream_mbs": floor["tcp_stream"]},
                       "rows": rows, "ext_rows": ext_rows, "goals": gl + gl13,
                       "consumer_rows": cons_rows, "eager_rows": eager_rows,
                       "reg_rows": [{k: v for k, v in r.items() if k != "errors"}
                                    for r in reg_rows],
                       "errors": {s.label: s.errors for s in sy.values() if s.errors},
                       "png": args.png, "markdown": os.path.abspath(args.out)}, f, indent=1)
    sys.stdout.write(text)
    print("compare: wrote %s%s%s" % (args.out, ", " + args.json if args.json else "",
                                     ", " + args.png if args.png else ""), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
