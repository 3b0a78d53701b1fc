"""The translation server under load: `keras-transformer serve` answering
concurrent clients that send Ding's whole sentences one a request, against
the `Translator` in this process on the same sentences.

    apt-get install trans-de-en          # the Ding dictionary
    pip install ".[serve]"
    python benchmarks/serve_load.py runs/small [--sentences 1000 --clients 8 32 --repeats 1]

The server (`examples/serve.py RUN`, default settings, on 127.0.0.1 only)
runs in a process of its own; the clients are threads of this one, each
with its own keep-alive connection, each sending the next sentence as soon
as its last answer came. Timed in turns, round after round (this machine's
speed drifts): the Translator on the whole list in one call, and again
with its batches held to the rows the most clients can fill (half of them,
one half for each of the server's two workers: the ceiling of batching
single-sentence requests); one sentence
at a time, each sentence first by a Translator call, then by a request to
the server (one client), so that each latency has its pair; then the server
with each larger number of clients. For each: sentences a second, and the
latency of a request (of a call, for the Translator one sentence at a time)
at the median and the 99th percentile.
Every answer is checked against the Translator's translation of that
sentence (the server's against `translate_documents`, which cuts a line of
two sentences into them as the server does): a lost answer (an error, a
refusal) or a different one is counted. Then a burst on each server: `--burst` requests of 8 sentences
each sent at once (far beyond the queue the server keeps, `--max-queue`
sentences): how many were refused with 503 and how fast, the server's
memory before and after (with slots: their caches full), and whether it
answers again.

While the most clients load the server, a probe sends the shortest of the
sentences every 0.2 s: its latency under load against the same sentence on
the idle server (before the round) says how long a short request waits
behind long ones. `--slots N` also runs a server with continuous batching
(`serve --slots N`; the default server searches batches), timed in the
same turns with the same clients and probe.

Goals: with 32 clients at least 0.9x the Translator's whole-list
throughput and at least 3x one client's; the short sentence under load
within 3x its idle latency; the 99th-percentile latency with one client at
most 1.2x that of one Translator call; no lost or wrong answer; the burst
refused fast and the server recovering.
"""

import argparse
import concurrent.futures
import http.client
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from common import machine  # noqa: E402
from translate_file import ding_sentences  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SERVE = os.path.join(os.path.dirname(HERE), "examples", "serve.py")


class Server:
    """`examples/serve.py RUN` on a free loopback port."""

    def __init__(self, run_dir, options):
        import socket

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.process = subprocess.Popen(
            [sys.executable, SERVE, run_dir, "--port", str(self.port), *options],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 300
        while True:
            try:
                urllib.request.urlopen(self.url("health"), timeout=5)
                return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.process.kill()
                    raise RuntimeError("the server did not start") from None
                time.sleep(0.2)

    def url(self, path):
        return f"http://127.0.0.1:{self.port}/{path}"

    def memory(self):
        """The server's resident memory, in MiB."""
        with open(f"/proc/{self.process.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024

    def stop(self):
        self.process.terminate()
        return self.process.wait(timeout=120)


def _post(connection, q, languages):
    """One request on a keep-alive connection (`q` a sentence or a list):
    `(status, translatedText or None)`."""
    body = json.dumps({"q": q, "source": languages[0], "target": languages[1]})
    connection.request("POST", "/translate", body, {"Content-Type": "application/json"})
    response = connection.getresponse()
    answer = json.loads(response.read())
    return response.status, answer.get("translatedText")


def probe_latencies(server, sentence, languages, stop, every=0.2, count=None):
    """Latencies of `sentence` sent every `every` seconds until `stop` is
    set (or `count` times)."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=300)
    found = []
    while not stop.is_set() and (count is None or len(found) < count):
        started = time.perf_counter()
        _post(connection, sentence, languages)
        found.append(time.perf_counter() - started)
        time.sleep(every)
    connection.close()
    return found


def clients(server, sentences, count, languages, probe=None):
    """All `sentences`, sent by `count` clients one a request: seconds in
    all, each request's latency, and each answer (None if lost); with
    `probe` (a sentence), also its latencies meanwhile (`probe_latencies`)."""
    answers, latencies = [None] * len(sentences), [0.0] * len(sentences)
    next_index, lock = iter(range(len(sentences))), threading.Lock()

    def client():
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=300)
        while True:
            with lock:
                index = next(next_index, None)
            if index is None:
                connection.close()
                return
            started = time.perf_counter()
            try:
                status, text = _post(connection, sentences[index], languages)
                answers[index] = text if status == 200 else None
            except (OSError, http.client.HTTPException, ValueError):
                connection.close()
                connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=300)
            latencies[index] = time.perf_counter() - started

    stop, probed = threading.Event(), []
    prober = threading.Thread(target=lambda: probed.extend(
        probe_latencies(server, probe, languages, stop))) if probe else None
    started = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(count)]
    for thread in threads + ([prober] if prober else []):
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - started
    stop.set()
    if prober:
        prober.join()
    return seconds, latencies, answers, probed


def burst(server, sentences, count, languages):
    """`count` requests of `sentences` sent at once, each on its own
    connection: the statuses, the slowest 503's seconds, the memory before
    and after, and whether one more request is then answered."""
    before = server.memory()
    gate = threading.Barrier(count)

    def one(_):
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=300)
        gate.wait()
        started = time.perf_counter()
        try:
            status, _ = _post(connection, sentences, languages)
        except (OSError, http.client.HTTPException, ValueError):
            status = None
        connection.close()
        return status, time.perf_counter() - started

    with concurrent.futures.ThreadPoolExecutor(count) as threads:
        results = list(threads.map(one, range(count)))
    peak = server.memory()
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=300)
    recovered = _post(connection, sentences[0], languages)[0] == 200
    connection.close()
    refused = [seconds for status, seconds in results if status == 503] or [0.0]
    return ([status for status, _ in results], (np.median(refused), max(refused)), before, peak,
            recovered)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", help="a trained run folder (German to English, on Ding)")
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--clients", type=int, nargs="+", default=[8, 32],
                        help="numbers of concurrent clients, beside one client (always)")
    parser.add_argument("--repeats", type=int, default=1, help="rounds of turns")
    parser.add_argument("--burst", type=int, default=400, help="requests sent at once")
    parser.add_argument("--max-queue", type=int, default=128,
                        help="the server's --max-queue for the burst")
    parser.add_argument("--slots", type=int,
                        help="also time a server with this many slots a worker (continuous "
                        "batching) in the same turns")
    args = parser.parse_args()

    from keras_transformer.batch_defaults import share_cores
    from keras_transformer.run_folder import languages as folder_languages

    languages = folder_languages(args.run_dir) or ("de", "en")
    sentences = ding_sentences(args.sentences)
    share_cores()  # as translate and serve do: each search in flight its cores
    from keras_transformer.decoding import Translator

    translator = Translator.from_directory(args.run_dir)
    expected = translator.translate(sentences)
    # What the server answers: each text cut into its sentences first (the
    # server's default), as `translate_documents` does; 8 of Ding's first
    # 400 lines are two sentences, which translate otherwise as one line.
    served = translator.translate_documents(sentences)
    # The largest batches the most clients can fill: their sentences spread
    # over the server's two workers (its default --workers). The Translator
    # held to them is the ceiling of batching single-sentence requests.
    capped_rows = max(args.clients) // 2
    capped = Translator(translator.model, translator.tokenizer, batch_size=capped_rows)
    capped.translate(sentences[:capped_rows])  # traced before it is timed
    capped_name = f"Translator, {capped_rows} a batch"
    server = Server(args.run_dir, ["--max-queue", str(args.max_queue)])
    servers = {"server": server}
    short = min(sentences, key=len)
    probes = {}  # name -> (idle latencies, latencies under the most clients)
    try:
        if args.slots:
            servers[f"server, {args.slots} slots"] = Server(
                args.run_dir, ["--max-queue", str(args.max_queue), "--slots", str(args.slots)])
        for each in servers.values():
            clients(each, sentences[:16], 4, languages)  # warm
        args.clients = [1] + sorted(set(args.clients) - {1})
        times = {name: [] for name in ["Translator, whole list", capped_name,
                                       "Translator, one a call"]
                 + [f"{kind}, {count} client(s)" for count in args.clients
                    for kind in (servers if count > 1 else ["server"])]}
        latencies, wrong, lost = {name: [] for name in times}, dict.fromkeys(times, 0), \
            dict.fromkeys(times, 0)
        for _ in range(args.repeats):
            started = time.perf_counter()
            found = translator.translate(sentences)
            times["Translator, whole list"].append(time.perf_counter() - started)
            wrong["Translator, whole list"] += sum(a != b for a, b in zip(found, expected))
            started = time.perf_counter()
            found = capped.translate(sentences)
            times[capped_name].append(time.perf_counter() - started)
            wrong[capped_name] += sum(a != b for a, b in zip(found, expected))
            connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=300)
            alone = {"Translator, one a call": [], "server, 1 client(s)": []}
            for sentence, reference, answer in zip(sentences, expected, served):
                call = time.perf_counter()
                wrong["Translator, one a call"] += translator.translate([sentence])[0] != reference
                alone["Translator, one a call"].append(time.perf_counter() - call)
                call = time.perf_counter()
                status, text = _post(connection, sentence, languages)
                alone["server, 1 client(s)"].append(time.perf_counter() - call)
                lost["server, 1 client(s)"] += status != 200
                wrong["server, 1 client(s)"] += status == 200 and text != answer
            connection.close()
            for name, values in alone.items():
                times[name].append(sum(values))
                latencies[name] += values
            for count, (kind, each) in ((count, pair) for count in args.clients[1:]
                                        for pair in servers.items()):
                name = f"{kind}, {count} client(s)"
                probe = short if count == max(args.clients) else None
                if probe:
                    idle = probe_latencies(each, probe, languages, threading.Event(), 0.05, 10)
                seconds, request_latencies, answers, probed = clients(each, sentences, count,
                                                                      languages, probe)
                if probe:
                    before, under = probes.get(kind, ([], []))
                    probes[kind] = (before + idle, under + probed)
                times[name].append(seconds)
                latencies[name] += request_latencies
                lost[name] += sum(answer is None for answer in answers)
                wrong[name] += sum(answer is not None and answer != reference
                                   for answer, reference in zip(answers, served))
        bursts = {kind: burst(each, sentences[:8], args.burst, languages)
                  for kind, each in servers.items()}
    finally:
        exit_statuses = {kind: each.stop() for kind, each in servers.items()}

    print(f"Machine: {machine()}. {args.run_dir}, {len(sentences)} Ding sentences, beam "
          f"{translator.beam_size}; medians of {args.repeats} round(s).\n")
    rate = {name: len(sentences) / float(np.median(values)) for name, values in times.items()}
    print(f"{'':28s} {'sentences/s':>12s} {'p50 ms':>8s} {'p99 ms':>8s} {'lost':>5s} {'wrong':>6s}")
    for name in times:
        p50, p99 = (np.percentile(latencies[name], q) * 1000 if latencies[name] else float("nan")
                    for q in (50, 99))
        print(f"{name:28s} {rate[name]:12.1f} {p50:8.0f} {p99:8.0f} {lost[name]:5d} "
              f"{wrong[name]:6d}")
    whole, most = rate["Translator, whole list"], max(args.clients)
    print()
    single = np.percentile(latencies["server, 1 client(s)"], 99)
    alone = np.percentile(latencies["Translator, one a call"], 99)
    print(f"p99 latency, one client / one Translator call: {single / alone:.2f}x (goal <= 1.2x)")
    print(f"{most} clients / one client: "
          f"{rate[f'server, {most} client(s)'] / rate['server, 1 client(s)']:.2f}x (goal >= 3x)")
    print(f"{most} clients / Translator whole list: {rate[f'server, {most} client(s)'] / whole:.2f}x "
          f"(goal >= 0.9x); / {capped_name}: {rate[f'server, {most} client(s)'] / rate[capped_name]:.2f}x; "
          f"{capped_name} / whole list: {rate[capped_name] / whole:.2f}x")
    for kind, (idle, under) in probes.items():
        others = f"{kind}, {most} client(s)"
        print(f"{kind}: {most} clients / Translator whole list {rate[others] / whole:.2f}x; "
              f"the shortest sentence ({len(short)} characters) under their load "
              f"{np.median(under) * 1000:.0f} ms at the median ({len(under)} probes), idle "
              f"{np.median(idle) * 1000:.0f} ms: {np.median(under) / np.median(idle):.2f}x "
              "(goal <= 3x)")
    for kind, (statuses, refusal_seconds, memory_before, memory_after, recovered) in \
            bursts.items():
        print(f"{kind}: burst of {args.burst} requests of 8 sentences at once (queue "
              f"{args.max_queue} sentences): {statuses.count(200)} answered, "
              f"{statuses.count(503)} refused with 503 (in {refusal_seconds[0] * 1000:.0f} ms at "
              f"the median, the slowest in {refusal_seconds[1] * 1000:.0f} ms), "
              f"{statuses.count(None)} failed; memory {memory_before:.0f} -> "
              f"{memory_after:.0f} MiB; answers again: {recovered}; exit status after SIGTERM: "
              f"{exit_statuses[kind]}.")


if __name__ == "__main__":
    main()
