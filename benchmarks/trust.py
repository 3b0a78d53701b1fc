"""How far to trust a translation (docs/trust.md): what the guard changes
and how well the confidence predicts, against today's translations, in one
run.

    apt-get install trans-de-en                    # the Ding dictionary
    keras-transformer calibrate runs/small         # where the run has no calibration.json
    python benchmarks/trust.py runs/small runs/demo [--repeats 3]

For each run (German to English, trained on Ding), two sets of inputs:
- the held-out sentences: the whole sentences (4+ words ending in . ? or
  !) of the run's test split, with their references;
- inputs such as users send (`user_inputs`, built here from the kinds the
  issue trackers of LibreTranslate and Argos Translate show): single words
  and short phrases (Ding's test-split headwords), repeated syllables and
  punctuation runs, numbers, URLs, e-mail addresses and emoji, other
  languages and code.

Each is translated by the run's `Translator` without the guard (today's
translations) and with it (the default), and assessed (`quality=True`).
Reported:
- loops (`trust.loop_of`) and runaway outputs (`trust.ran_away`), before
  and after: the guard's goal is none left;
- copies of sources of 4+ words (`trust.is_copy`);
- corpus chrF of the held-out sentences, before and after;
- how many translations the guard did not flag are bit-identical
  (translation and score);
- the time of the held-out file with and without the guard, and with the
  confidence asked for, in turns (`--repeats`; the median time, and the
  median over the turns of each turn's ratio);
- detection on the held-out sentences: bad translations (a loop, a copy,
  or the worst quarter by sentence chrF) against good ones (the best
  quarter, no flag), separated by the confidence and by the search's own
  score alone (the baseline), as AUROC; and the confidence's expected
  calibration error against what it predicts (sentence chrF >= 45).

The run's calibrator (`calibration.json`, from `keras-transformer
calibrate`, fitted on its validation sentences) is used; a run without one
gets one fitted here on its validation sentences (and not saved).
"""

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Inputs such as users send, by kind (LibreTranslate #46, #167, #168, #183,
# #210, #549; Argos Translate #318; EasyNMT #38): what they typed, and what
# makes engines loop.
SYLLABLES = ["la", "ha", "na", "da", "pre-", "bla", "ja", "nein", "oh", "mi", "tra", "hey"]
PUNCTUATION = ["!", "?", ".", "-", "*", "=", "#", "…", "?!", "..."]
NUMBERS = ["12345", "3,14159", "2026-12-07", "+49 30 1234567", "1.000.000 €", "50 %",
           "Nr. 17", "0815", "10:45 Uhr", "1/2", "§ 242 BGB", "ISBN 978-3-16-148410-0",
           "v2.13.0", "42", "1e-9", "100 km/h"]
ADDRESSES = ["https://example.com/path?x=1", "www.beispiel.de", "info@beispiel.de",
             "https://de.wikipedia.org/wiki/Transformer_(Maschinelles_Lernen)",
             "max.mustermann@firma.example", "ftp://files.example.org/pub/readme.txt",
             "http://127.0.0.1:5000/translate", "Schreiben Sie an hilfe@beispiel.de."]
EMOJI = ["🪨", "😀", "👍👍👍", "🇩🇪", "❤️", "🙂 danke", "🎉🎉", "→", "✔", "©", "😂😂😂😂"]
OTHER_LANGUAGES = [
    "Good morning, how are you?", "The weather is nice today.", "I don't know.",
    "Bonjour tout le monde.", "Je ne sais pas.", "Où est la gare ?",
    "cada vez", "nunca jamás", "¿Dónde está el baño?", "Muchas gracias.",
    "Grazie mille.", "Dov'è la stazione?", "Dank je wel.", "Tack så mycket.",
    "Спасибо большое.", "谢谢", "ありがとうございます", "감사합니다", "شكرا جزيلا",
    "Dziękuję bardzo.", "Köszönöm szépen.", "Teşekkür ederim.", "Obrigado!",
]
CODE = ["for i in range(10): print(i)", "SELECT * FROM users WHERE id = 1;",
        "<div class=\"box\">Hallo</div>", "def hallo(): return 'Welt'", "x = y + 1",
        "git commit -m \"fix\"", "{\"name\": \"Hallo\"}", "#include <stdio.h>",
        "console.log('Hallo Welt');", "ls -la /usr/share", "a[i] = b[j] * 2;",
        "import numpy as np", "if (x > 0) { return x; }", "SELECT name FROM Haus;"]


def user_inputs(words, phrases):
    """The inputs such as users send: the lists above, Ding's single words
    and short phrases, and syllables and punctuation repeated as users
    type them."""
    repeated = []
    for syllable in SYLLABLES:
        repeated += [syllable * 4, " ".join([syllable] * 3), " ".join([syllable] * 6),
                     (syllable.capitalize() + " ") * 2 + syllable + "!"]
    for mark in PUNCTUATION:
        repeated += [mark * 3, mark * 8, f"Was{mark * 4}", f"Hallo {mark * 5}"]
    return (words + phrases + repeated + NUMBERS + ADDRESSES + EMOJI + OTHER_LANGUAGES
            + CODE)


def held_out(run, split, limit=None):
    """The run's whole sentences of `split` with their references."""
    from keras_transformer.evaluation import run_corpus, select_pairs

    return select_pairs(run_corpus(run).pairs(split).as_numpy_iterator(), limit=limit,
                        only_sentences=True)


def ding_words_and_phrases(run, count=120):
    """Single words and phrases of 2-3 words from the run's test split
    (German sources), `count` each, spread over it."""
    from keras_transformer.evaluation import run_corpus, select_pairs

    pairs = select_pairs(run_corpus(run).pairs("test").as_numpy_iterator())
    words = [s for s, _ in pairs if len(s.split()) == 1 and s.isalpha()]
    phrases = [s for s, _ in pairs if 2 <= len(s.split()) <= 3]
    spread = lambda items: [items[i * len(items) // count] for i in range(count)]  # noqa: E731
    return spread(words), spread(phrases)


def runaways(translator, sources, translations):
    """How many translations loop, and how many run away (as the guard
    reads them)."""
    from keras_transformer import trust

    loops = sum(trust.loop_of(s, t) is not None for s, t in zip(sources, translations))
    lengths = translator.source_lengths(sources)
    away = sum(translator._guarded_flags(s, t, min(n, translator.model.config.max_source_tokens))
               >= {"runaway"} for s, t, n in zip(sources, translations, lengths) if n)
    return loops, away


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="trained run folders (German to English)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sentences", type=int, help="at most this many held-out sentences")
    args = parser.parse_args()

    from keras_transformer.batch_defaults import decoding_kernels, share_cores

    decoding_kernels()
    share_cores()
    import numpy as np
    import sacrebleu

    from common import machine
    from keras_transformer import trust
    from keras_transformer.decoding import Translator
    from keras_transformer.evaluation import fit_calibrator, score

    print(machine())
    for run in args.runs:
        pairs = held_out(run, "test", args.sentences)
        sources, references = [s for s, _ in pairs], [r for _, r in pairs]
        words, phrases = ding_words_and_phrases(run)
        users = user_inputs(words, phrases)
        guarded = Translator.from_directory(run)
        plain = Translator.from_directory(run, guard=False, calibrator=None)
        if guarded.calibrator is None:
            print(f"{run}: {guarded.calibration_note}; fitting one on its validation sentences "
                  "(not saved) ...", flush=True)
            calibrator = fit_calibrator(plain, held_out(run, "validation"))
            guarded = Translator.from_directory(run, calibrator=calibrator)
        print(f"\n{run}: {len(sources)} held-out sentences, {len(users)} inputs such as users "
              f"send; calibrator fitted on {guarded.calibrator.report.get('sentences')} "
              f"validation sentences (alpha {guarded.calibrator.alpha})")

        before = plain.translate(sources, n_best=1)
        after = guarded.translate(sources, n_best=1, quality=True)
        texts_before = [found[0][0] for found in before]
        texts_after = [found[0][0] for found, _ in after]
        for name, inputs, today, now in (
                ("held-out sentences", sources, texts_before, texts_after),
                ("inputs such as users send", users, plain.translate(users),
                 guarded.translate(users))):
            loops, away = runaways(plain, inputs, today)
            loops_now, away_now = runaways(plain, inputs, now)
            copies = sum(len(s.split()) >= 4 and trust.is_copy(s, t) for s, t in zip(inputs, today))
            copies_now = sum(len(s.split()) >= 4 and trust.is_copy(s, t)
                             for s, t in zip(inputs, now))
            print(f"  {name}: loops {loops} -> {loops_now}, runaways {away} -> {away_now}, "
                  f"copies of 4+ word sources {copies} -> {copies_now} (of {len(inputs)})")
        flagged = {i for i, (s, t) in enumerate(zip(sources, texts_before))
                   if guarded._runaway(s, t, len(guarded.tokenizer.vocabulary.encode(s)))
                   is not False}
        same = sum(before[i] == found for i, (found, _) in enumerate(after)
                   if i not in flagged)
        print(f"  not flagged by the guard: {same} of {len(sources) - len(flagged)} "
              "bit-identical (translation and score)")
        print(f"  chrF of the held-out sentences: {score(texts_before, references).chrf:.2f} -> "
              f"{score(texts_after, references).chrf:.2f}")

        calls = {"without the guard": lambda: plain.translate(sources),
                 "with the guard": lambda: guarded.translate(sources),
                 "with the confidence": lambda: guarded.translate(sources, quality=True)}
        times = {name: [] for name in calls}
        for turn in range(args.repeats):
            # Each turn times the three in turns, in an order that rotates;
            # each one's ratio is its median over the turns of its time to
            # the same turn's time without the guard, which the machine's
            # drift between turns (5-30% here) moves less than the ratio of
            # medians.
            names = list(calls)[turn % 3:] + list(calls)[:turn % 3]
            for name in names:
                start = time.perf_counter()
                calls[name]()
                times[name].append(time.perf_counter() - start)
        base = times["without the guard"]
        print("  the held-out file: " + ", ".join(
            f"{name} {statistics.median(values):.2f} s "
            f"({statistics.median(t / b for t, b in zip(values, base)):.3f}x)"
            for name, values in times.items()) + f" (medians of {args.repeats} turns)")

        chrf = np.array([sacrebleu.sentence_chrf(t, [r]).score
                         for t, r in zip(texts_after, references)])
        confidence = np.array([q.confidence for _, q in after])
        scores = np.array([found[0][1] for found, _ in after])
        flags = [q.flags for _, q in after]
        low, high = np.quantile(chrf, [0.25, 0.75])
        bad = np.array([("repetition" in f) or ("copy" in f) or c <= low
                        for f, c in zip(flags, chrf)])
        good = np.array([not f and c >= high for f, c in zip(flags, chrf)])
        kept = bad | good
        print(f"  detection ({bad.sum()} bad: loop, copy or chrF <= {low:.1f}; {good.sum()} good: "
              f"chrF >= {high:.1f}, no flag): AUROC of the confidence "
              f"{trust.auroc(confidence[kept], good[kept]):.3f}, of the search's score alone "
              f"{trust.auroc(scores[kept], good[kept]):.3f}")
        print(f"  calibration: expected calibration error "
              f"{trust.calibration_error(confidence, chrf >= trust.TARGET):.3f} (mean confidence "
              f"{confidence.mean():.3f}, share with chrF >= {trust.TARGET:g}: "
              f"{(chrf >= trust.TARGET).mean():.3f})")


if __name__ == "__main__":
    main()
