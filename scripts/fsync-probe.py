#!/usr/bin/env python3
"""fdatasync concurrency probe: does this disk complete overlapping fdatasyncs faster
than one after the other?

It mimics a partition's commit rounds under `--fsync always`: one pre-zeroed, fdatasynced
file (like a pre-extended `.wal`, so no round commits the ext4 journal), and C processes,
each with its own open file description (like the per-slot descriptors of overlapping
rounds), each looping `pwrite(BYTES)` through its own stretch of the file, then
`fdatasync`. C = 1
is today's one round in flight. If C = 2 completes about twice the syncs per second at
about the same latency, the device runs flushes in parallel; if the rate stays and the
latency doubles, flushes are serialised and overlapping rounds can only save the gap
between one flush and the next (write, wake-ups, data write-back), which the last column
estimates: `rate(C) / rate(1)`.

With --partitions P1,P2,... it measures instead the floor of a commit round under
`--fsync always`: P partitions at once, each looping one round after the other (BYTES into
its own pre-zeroed `.wal`, one 32-byte entry into its `.idx`, both fdatasynced at once, as
`storage::log::io` does), and prints the round's latency percentiles and the share of
rounds over 5 and 10 ms. No broker can acknowledge under `always` faster than this disk
completes such rounds; compare it with bench.sh (d)'s ack latency.

Every row also gives the machine's steal time over it (/proc/stat): on a VM whose host
runs the virtual disk's I/O on the vCPUs' own host CPUs, concurrent flushes get vCPUs
stolen for 15-20 ms at a time, and those stalls are the rows' tails (docs/LATENCY.md (n)).

Usage: scripts/fsync-probe.py [--dir DIR] [--seconds S] [--bytes N] [--concurrency 1,2,3,4]
       scripts/fsync-probe.py [--dir DIR] [--seconds S] [--bytes N] --partitions 1,4 [--burners B]
DIR must be on the disk under test (not tmpfs); default: the current directory.
"""

import argparse
import multiprocessing
import os
import tempfile
import threading
import time

ZEROED_BYTES = 64 << 20


def percentile(sorted_values, p):
    if not sorted_values:
        return float("nan")
    i = min(len(sorted_values) - 1, int(p / 100.0 * len(sorted_values)))
    return sorted_values[i]


def in_processes(count, work):
    """Runs work(i) -> [latency, ...] in `count` processes at once and returns all the
    latencies, sorted. Processes, not threads: Python's threads share one interpreter lock,
    and a thread back from its fdatasync waits for it, so threads alone showed stalls of
    5-15 ms that were the lock's, not the disk's."""
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    workers = [context.Process(target=lambda i=i: results.put(work(i))) for i in range(count)]
    for w in workers:
        w.start()
    latencies = []
    for _ in workers:
        latencies.extend(results.get())
    for w in workers:
        w.join()
    latencies.sort()
    return latencies


def steal_ticks():
    """The machine's steal time so far, in clock ticks (/proc/stat): time the hypervisor
    ran something else while a vCPU of this VM was ready. 0 on bare metal."""
    with open("/proc/stat") as stat:
        fields = stat.readline().split()
    return int(fields[8]) if fields[0] == "cpu" and len(fields) > 8 else 0


def steal_ms_since(ticks):
    return (steal_ticks() - ticks) * 1000.0 / os.sysconf("SC_CLK_TCK")


def run(path, concurrency, seconds, nbytes):
    stop_at = time.monotonic() + seconds
    data = b"\x01" * nbytes
    slot_bytes = (ZEROED_BYTES // concurrency) // nbytes * nbytes

    def worker(i):
        # Each writer its own stretch of the file, so no two write the same blocks.
        fd = os.open(path, os.O_WRONLY)
        mine, at = [], 0
        try:
            while time.monotonic() < stop_at:
                started = time.perf_counter()
                os.pwrite(fd, data, i * slot_bytes + at)
                os.fdatasync(fd)
                mine.append(time.perf_counter() - started)
                at = (at + nbytes) % slot_bytes
        finally:
            os.close(fd)
        return mine

    began = time.monotonic()
    latencies = in_processes(concurrency, worker)
    elapsed = time.monotonic() - began
    return len(latencies) / elapsed, latencies


def zeroed_file(path, nbytes):
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    chunk = b"\x00" * (1 << 20)
    for i in range(nbytes >> 20):
        os.pwrite(fd, chunk, i << 20)
    os.fsync(fd)
    return fd


def rounds(tmp, partitions, seconds, nbytes):
    """Commit rounds of `partitions` partitions at once, each in a process of its own
    (as the broker's cores run apart): round latencies, sorted."""
    stop_at = time.monotonic() + seconds
    data, entry = b"\x01" * nbytes, b"\x02" * 32

    def partition(i):
        wal = zeroed_file(os.path.join(tmp, f"{i}.wal"), ZEROED_BYTES)
        idx = zeroed_file(os.path.join(tmp, f"{i}.idx"), 1 << 20)
        # The .idx fdatasync runs on a helper thread of the partition's own, started
        # once: a thread per round would add its start-up to every round.
        go, synced, running = threading.Semaphore(0), threading.Semaphore(0), [True]

        def idx_syncer():
            while True:
                go.acquire()
                if not running[0]:
                    return
                os.fdatasync(idx)
                synced.release()

        helper = threading.Thread(target=idx_syncer)
        helper.start()
        mine, at, slot = [], 0, 0
        try:
            while time.monotonic() < stop_at:
                started = time.perf_counter()
                os.pwrite(wal, data, at)
                os.pwrite(idx, entry, slot * 32)
                go.release()
                os.fdatasync(wal)
                synced.acquire()
                mine.append(time.perf_counter() - started)
                at = (at + nbytes) % (ZEROED_BYTES - nbytes)
                slot = (slot + 1) % ((1 << 20) // 32)
        finally:
            running[0] = False
            go.release()
            helper.join()
            os.close(wal)
            os.close(idx)
        return mine

    return in_processes(partitions, partition)


class Burners:
    """`count` processes that only spin, for the length of a row: whether the disk's
    latency depends on how busy the CPUs are. On bare metal it should not; on a VM whose
    host runs the virtual disk on the vCPUs' host CPUs, busy vCPUs get stolen while
    flushes run, and the row's tails and steal rise together."""

    def __init__(self, count):
        self.count = count

    def __enter__(self):
        context = multiprocessing.get_context("fork")
        self.stop = context.Event()
        self.procs = [context.Process(target=self.spin) for _ in range(self.count)]
        for proc in self.procs:
            proc.start()
        return self

    def spin(self):
        while not self.stop.is_set():
            for _ in range(10_000):
                pass

    def __exit__(self, *exc):
        self.stop.set()
        for proc in self.procs:
            proc.join()


def print_rounds(args):
    print(f"commit-round probe: {args.bytes} B into .wal + 32 B into .idx, both fdatasynced, "
          f"per round; pre-zeroed files in {args.dir}, {args.seconds:g} s per row, "
          f"{args.burners} CPU burner(s) beside")
    print(f"{'partitions':>10} {'rounds/s':>9} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} "
          f"{'p99.9 ms':>9} {'max ms':>8} {'>5 ms':>7} {'>10 ms':>7} {'steal ms':>9}")
    for p in [int(x) for x in args.partitions.split(",")]:
        with tempfile.TemporaryDirectory(dir=args.dir, prefix="fsync-probe.") as tmp:
            with Burners(args.burners):
                stolen = steal_ticks()
                lat = rounds(tmp, p, args.seconds, args.bytes)
                steal_ms = steal_ms_since(stolen)
        over = lambda ms: 100.0 * sum(1 for v in lat if v > ms / 1e3) / max(len(lat), 1)
        print(f"{p:>10} {len(lat) / args.seconds:>9.0f} {percentile(lat, 50) * 1e3:>8.2f} "
              f"{percentile(lat, 90) * 1e3:>8.2f} {percentile(lat, 99) * 1e3:>8.2f} "
              f"{percentile(lat, 99.9) * 1e3:>9.2f} {lat[-1] * 1e3 if lat else 0:>8.2f} "
              f"{over(5):>6.2f}% {over(10):>6.2f}% {steal_ms:>9.0f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=".")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--bytes", type=int, default=10_000)
    parser.add_argument("--concurrency", default="1,2,3,4")
    parser.add_argument("--partitions", help="commit rounds of this many partitions at once")
    parser.add_argument("--burners", type=int, default=0,
                        help="with --partitions: processes that spin beside each row")
    args = parser.parse_args()
    if args.partitions:
        print_rounds(args)
        return
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="fsync-probe.") as tmp:
        path = os.path.join(tmp, "probe.wal")
        fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
        chunk = b"\x00" * (1 << 20)
        for i in range(ZEROED_BYTES >> 20):
            os.pwrite(fd, chunk, i << 20)
        os.fsync(fd)
        os.close(fd)
        print(f"fdatasync probe: {args.bytes} B per write, pre-zeroed file in {args.dir}, "
              f"{args.seconds:g} s per row")
        print(f"{'in flight':>9} {'syncs/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
              f"{'x rate(1)':>10} {'steal ms':>9}")
        base = None
        for c in [int(x) for x in args.concurrency.split(",")]:
            stolen = steal_ticks()
            rate, lat = run(path, c, args.seconds, args.bytes)
            steal_ms = steal_ms_since(stolen)
            base = base or rate
            print(f"{c:>9} {rate:>9.0f} {percentile(lat, 50) * 1e3:>8.2f} "
                  f"{percentile(lat, 99) * 1e3:>8.2f} {lat[-1] * 1e3 if lat else 0:>8.2f} "
                  f"{rate / base:>10.2f} {steal_ms:>9.0f}")


if __name__ == "__main__":
    main()
