"""Our server against LibreTranslate itself, on the same weights: the run's
CTranslate2 export built into an Argos package for LibreTranslate, and
`keras-transformer serve` of the same run, each with its defaults, both on
127.0.0.1 and offline.

    apt-get install trans-de-en                  # the Ding dictionary
    pip install ".[serve,ctranslate2]"
    python -m venv .venv-libretranslate && .venv-libretranslate/bin/pip install libretranslate==1.9.6
    python benchmarks/against_libretranslate.py runs/small [--sentences 400 --repeats 3]

Timed in turns, round after round (this machine's speed drifts), each
server's runs beside the other's:
- closed-loop clients (1, 8 and 32 by default; `--clients`), each sending
  the next Ding sentence, one a request, as soon as its last answer came:
  sentences a second and the 95th-percentile latency;
- one sentence on an idle server, short (3-5 words) and long (20 words or
  more), each a request after the other's, never the same text twice in a
  row on one server (Argos answers a repeated request from its cache of
  the last one): the median latency.
Our server runs twice, with its default runtime (a run folder's: keras)
and with `--runtime ctranslate2` on the export that LibreTranslate gets.
The share of identical answers is each one's against LibreTranslate's for
the same sentences (they differ by design: LibreTranslate's length penalty
0.2 and its own fixes of punctuation and case, our alpha).

Goals (issue 66 on 2 cores): 32 clients at least 2x LibreTranslate's
sentences a second and a 95th percentile at most its; one client at least
its throughput; idle latency at most its.

The Argos package and LibreTranslate's offline start are the tests' own
(tests/helpers/libretranslate.py), so the benchmark measures the peer the
differential tests check.
"""

import argparse
import http.client
import json
import os
import pathlib
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from common import machine  # noqa: E402
from serve_load import Server, _post, clients  # noqa: E402
from translate_file import ding_sentences  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

from helpers import libretranslate as peer  # noqa: E402


class LibreTranslate:
    """LibreTranslate serving `packages`, as `serve_load.clients` drives a
    server (`port`, `stop`)."""

    def __init__(self, packages, work):
        self.process, url = peer.start(packages, work, ["de", "en"])
        self.port = int(url.rsplit(":", 1)[1].strip("/"))

    def stop(self):
        self.process.terminate()
        return self.process.wait(timeout=120)


def idle_latencies(servers, texts, languages, repeats):
    """Median seconds of one request of each text on each idle server,
    the servers in turns for each text (so that each server's consecutive
    requests are different texts)."""
    found = {name: [] for name in servers}
    connections = {name: http.client.HTTPConnection("127.0.0.1", server.port, timeout=300)
                   for name, server in servers.items()}
    for _ in range(repeats):
        for text in texts:
            for name in servers:
                started = time.perf_counter()
                _post(connections[name], text, languages)
                found[name].append(time.perf_counter() - started)
    for connection in connections.values():
        connection.close()
    return {name: float(np.median(values)) for name, values in found.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", help="a trained run folder (German to English, on Ding)")
    parser.add_argument("--sentences", type=int, default=400)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--repeats", type=int, default=3, help="rounds of turns")
    parser.add_argument("--idle", type=int, default=12,
                        help="short and long sentences each timed on the idle servers")
    args = parser.parse_args()
    if peer.executable() is None:
        parser.error("LibreTranslate is not installed: python -m venv .venv-libretranslate && "
                     ".venv-libretranslate/bin/pip install libretranslate==1.9.6")

    from keras_transformer.export import export_run

    languages = ("de", "en")
    sentences = ding_sentences(args.sentences)
    pool = ding_sentences(4000)
    short = [text for text in pool if 3 <= len(text.split()) <= 5][:args.idle]
    long = [text for text in pool if len(text.split()) >= 20][:args.idle]
    work = pathlib.Path(tempfile.mkdtemp(prefix="against-libretranslate-"))
    export_run(args.run_dir, str(work / "export"), formats=["ctranslate2"])
    (work / "packages").mkdir()
    peer.argos_packages(work / "export" / "ctranslate2", pathlib.Path(args.run_dir)
                        / "tokenizer.model", *languages, work / "packages")
    (work / "libretranslate").mkdir()
    servers = {}
    try:
        servers["LibreTranslate"] = LibreTranslate(work / "packages", work / "libretranslate")
        servers["ours"] = Server(args.run_dir, ["--languages", "de-en"])
        servers["ours, ctranslate2"] = Server(str(work / "export"), [
            "--languages", "de-en", "--runtime", "ctranslate2"])
        for server in servers.values():
            clients(server, sentences[:16], 4, languages)  # warm
        rates = {(name, count): [] for name in servers for count in args.clients}
        latencies = {key: [] for key in rates}
        answers = {}
        idle = {kind: {name: [] for name in servers} for kind in ("short", "long")}
        for _ in range(args.repeats):
            for kind, texts in (("short", short), ("long", long)):
                for name, seconds in idle_latencies(servers, texts, languages, 1).items():
                    idle[kind][name].append(seconds)
            for count in args.clients:
                for name, server in servers.items():
                    seconds, request_latencies, found, _ = clients(server, sentences, count,
                                                                   languages)
                    rates[name, count].append(len(sentences) / seconds)
                    latencies[name, count] += request_latencies
                    answers.setdefault(name, found)
    finally:
        for server in servers.values():
            server.stop()

    print(f"Machine: {machine()}. {args.run_dir}, {len(sentences)} Ding sentences, "
          f"{args.repeats} round(s); LibreTranslate {peer.VERSION} and ours, each with its "
          "defaults.\n")
    print(f"{'':22s} {'clients':>7s} {'sentences/s':>20s} {'p95 ms':>8s} {'lost':>5s}")
    for (name, count), values in rates.items():
        print(f"{name:22s} {count:7d} {min(values):9.1f}-{max(values):<10.1f} "
              f"{np.percentile(latencies[name, count], 95) * 1000:8.0f} "
              f"{sum(answer is None for answer in answers[name]):5d}")
    print()
    theirs = "LibreTranslate"
    for name in servers:
        if name == theirs:
            continue
        for count in args.clients:
            ratio = np.median(rates[name, count]) / np.median(rates[theirs, count])
            p95 = (np.percentile(latencies[name, count], 95)
                   / np.percentile(latencies[theirs, count], 95))
            print(f"{name}, {count} client(s): {ratio:.2f}x LibreTranslate's sentences a second, "
                  f"p95 {p95:.2f}x its")
        for kind in idle:
            ours, peer_seconds = np.median(idle[kind][name]), np.median(idle[kind][theirs])
            print(f"{name}, one {kind} sentence on an idle server: {ours * 1000:.1f} ms against "
                  f"{peer_seconds * 1000:.1f} ms ({ours / peer_seconds:.2f}x)")
        same = np.mean([a == b for a, b in zip(answers[name], answers[theirs])])
        print(f"{name}: {same:.1%} of answers identical to LibreTranslate's")
    print(json.dumps({"rates": {f"{name}, {count}": values for (name, count), values
                                in rates.items()},
                      "idle_ms": {kind: {name: float(np.median(values)) * 1000
                                         for name, values in found.items()}
                                  for kind, found in idle.items()}}))


if __name__ == "__main__":
    main()
