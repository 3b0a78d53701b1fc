"""What reading real posts as documents adds to translating them: splitting
into sentences, HTML (parsing, the alignment of the sentences a tag is
inside, rebuilding) and language detection, against the same sentences
translated as plain text, in one run, in turns.

    apt-get install trans-de-en          # the Ding dictionary
    pip install ".[serve]"
    python benchmarks/serve_documents.py RUN [--runtime onnx] [--posts 150 --repeats 3]
    pip install sentence-splitter        # for --splitters only
    python benchmarks/serve_documents.py --splitters

The posts: Ding's whole German sentences (evenly spread over it), made
into posts of 1 to 4 paragraphs of 1 to 4 sentences (seeded), in two
forms with the same words:
- as Discourse sends a post (plain text, paragraphs between blank lines);
- as Mastodon sends one (HTML: a `<p>` a paragraph; in about half the
  sentences a word in `<strong>`, `<em>` or a link, in the rest a whole
  sentence in `<em>` or none; a hashtag link ending some paragraphs; `<br>`
  where the text has a line break).

Contenders, each the runtime that `serve` gives the model (`--runtime`,
default the folder's own), timed in turns (`common.timed_interleaved`):
- sentences: the posts' sentences (as the splitter cuts them, checked equal
  for both forms) in one `Runtime.translate` call (with the keras runtime,
  its `Translator.translate`, which keeps no alignment): what a client that
  cut its posts itself would send as plain text;
- text: the plain posts through `Runtime.translate_documents` (cut,
  translated in one call, joined back);
- text, auto: the same after `Detector.detect` on each post (between de
  and en): Discourse's `/detect`, then its `/translate`;
- html: the HTML posts through `translate_documents(..., "html")` (with
  the keras runtime, the alignments its searches kept, for the sentences a
  tag starts or ends inside; with the others, alignment by position);
- html, auto: the same after detecting each post's language from its text
  (`documents.text_of`), as a Mastodon post with `"source": "auto"` is;
- sentences again: the first contender once more, last in each turn: how
  far two runs of the same work differ here, the noise of the ratios.
Goal: each at most 1.05x `sentences`. The HTTP server adds the same to
each (its JSON and batching), so it is left out.

`--splitters`: sentencex (the package's) against sentence-splitter (Moses'
rules, Koehn and Schroeder), in turns, on paragraphs of 1 to 4 Ding
entries (of `--sentences` whole sentences, those that begin with a
capital): the time to cut them all; the share of paragraphs cut exactly
into their entries; the boundaries between entries missed (two sentences
translated as one input); and the cuts inside an entry (mostly right:
an entry may hold two sentences, "Wer war das? - Wir nicht!"), with
those after a number counted apart (mostly wrong: "ins 21. | Jahrhundert").
"""

import argparse
import os
import random

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from common import machine, timed_interleaved  # noqa: E402
from translate_file import ding_sentences  # noqa: E402

TAGS = ("<strong>{word}</strong>", "<em>{word}</em>",
        '<a href="https://example.org/{slug}">{word}</a>')
HASHTAGS = ("Wetter", "Deutsch", "Sprache", "Reisen", "Fediverse")


def make_posts(count, seed=0):
    """`count` posts, each `(paragraphs, text, html)`: its paragraphs (lists
    of lines, each a list of sentences), and the post as plain text and as
    Mastodon's HTML."""
    rng = random.Random(seed)
    sentences = iter(ding_sentences(count * 7))
    posts = []
    for _ in range(count):
        paragraphs = []
        for _ in range(rng.randint(1, 4)):
            lines, line = [], []
            for _ in range(rng.randint(1, 4)):
                line.append(next(sentences))
                if rng.random() < 0.15:  # a line break inside the paragraph
                    lines.append(line)
                    line = []
            if line:
                lines.append(line)
            if rng.random() < 0.3:
                lines[-1][-1] += " #" + rng.choice(HASHTAGS)
            paragraphs.append(lines)
        text = "\n\n".join("\n".join(" ".join(line) for line in lines) for lines in paragraphs)
        html = "".join("<p>" + "<br>".join(" ".join(_marked(sentence, rng) for sentence in line)
                                            for line in lines) + "</p>"
                       for lines in paragraphs)
        posts.append((paragraphs, text, html))
    return posts


def _marked(sentence, rng):
    """`sentence` as HTML, with its markup: a word of it in a tag, the whole
    of it, or none; a trailing hashtag as Mastodon links one."""
    import html

    words = sentence.split(" ")
    tail = ""
    if words[-1].startswith("#"):
        tag = words.pop()[1:]
        tail = (f' <a href="https://social.example/tags/{tag.lower()}" class="mention hashtag" '
                f'rel="tag">#<span>{tag}</span></a>')
    words = [html.escape(word, quote=False) for word in words]
    roll = rng.random()
    if roll < 0.5 and len(words) > 2:
        at = rng.randrange(1, len(words) - 1)  # a word inside the sentence
        words[at] = rng.choice(TAGS).format(word=words[at], slug=words[at].lower().strip(".,!?"))
        return " ".join(words) + tail
    if roll < 0.65:
        return "<em>" + " ".join(words) + "</em>" + tail
    return " ".join(words) + tail


def compare_overhead(args):
    from keras_transformer import documents, runtimes
    from keras_transformer.documents.detection import Detector

    runtime = runtimes.open_runtime(args.run, args.runtime)
    language = (runtime.languages or ("de",))[0]
    posts = make_posts(args.posts)
    texts = [text for _, text, _ in posts]
    pages = [page for _, _, page in posts]
    sentences = [sentence for text in texts
                 for sentence in documents.read_document(text, language).sentences]
    html_sentences = [sentence for page in pages
                      for sentence in documents.read_document(page, language, "html").sentences]
    if sentences != html_sentences:
        raise SystemExit("The two forms of the posts cut into different sentences.")
    marked = sum(len(documents.marked_sentences([documents.HtmlDocument(page, language)]))
                 for page in pages)
    detector = Detector(["de", "en"])
    detector.detect("Guten Morgen")  # loads its language models

    def detected(items, format):
        return [detector.detect(documents.text_of(item, format))[0]["language"]
                for item in items]

    # The keras runtime's searches keep their alignments (`KerasRuntime`):
    # the plain text's sentences are searched without, by its Translator.
    plain = runtime.translator.translate if runtime.name == "keras" else runtime.translate
    runs = {
        "sentences": lambda: plain(sentences),
        "text": lambda: runtime.translate_documents(texts),
        "text, auto": lambda: (detected(texts, "text"), runtime.translate_documents(texts)),
        "html": lambda: runtime.translate_documents(pages, "html"),
        "html, auto": lambda: (detected(pages, "html"),
                               runtime.translate_documents(pages, "html")),
        "sentences again": lambda: plain(sentences),
    }
    found = detected(texts, "text") + detected(pages, "html")
    print(f"{machine()}; {args.run} on the {runtime.name} runtime; {len(posts)} posts, "
          f"{len(sentences)} sentences ({sum(map(len, sentences)):,} characters), "
          f"{marked} with a tag inside; detected as de: "
          f"{found.count('de')} of {len(found)}; median of {args.repeats} turns")
    times = timed_interleaved(runs, warmup=1, repeats=args.repeats)
    base = times["sentences"]
    for name, seconds in times.items():
        print(f"  {name:15s} {seconds:7.2f} s  {seconds / base:5.3f}x")


def compare_splitters(args):
    import re

    import sentence_splitter
    import sentencex

    rng = random.Random(0)
    entries = iter(sentence for sentence in ding_sentences(args.sentences) if sentence[0].isupper())
    paragraphs = []
    while True:
        paragraph = [sentence for _, sentence in zip(range(rng.randint(1, 4)), entries)]
        if not paragraph:
            break
        paragraphs.append(paragraph)
    texts = [" ".join(paragraph) for paragraph in paragraphs]
    moses = sentence_splitter.SentenceSplitter("de")
    cutters = {
        "sentencex": lambda text: [part.strip() for part in sentencex.segment("de", text)
                                   if part.strip()],
        "sentence-splitter": moses.split,
    }
    runs = {name: (lambda cut=cut: [cut(text) for text in texts]) for name, cut in cutters.items()}
    times = timed_interleaved(runs, warmup=1, repeats=args.repeats)
    boundaries = sum(len(paragraph) - 1 for paragraph in paragraphs)
    print(f"{machine()}; {len(texts)} paragraphs of 1-4 Ding entries (whole German sentences "
          f"that begin with a capital), {boundaries} boundaries between entries; median of "
          f"{args.repeats} turns")
    for name, cut in cutters.items():
        exact = missed = inside = ordinals = 0
        for text, paragraph in zip(texts, paragraphs):
            found = cut(text)
            exact += found == paragraph
            truth, cuts = _cuts(paragraph, text), _cuts(found, text)
            missed += len(truth - cuts)
            inside += len(cuts - truth)
            # "ins 21. | Jahrhundert": a cut after an ordinal number leaves
            # two fragments, each translated apart.
            ordinals += sum(bool(re.search(r"\d\.$", text[:at])) for at in cuts - truth)
        print(f"  {name:18s} {times[name]:7.3f} s ({times[name] / len(texts) * 1e6:5.1f} us a "
              f"paragraph)  cut as Ding's entries: {exact / len(texts):6.1%}  boundaries "
              f"missed: {missed}  cuts inside an entry: {inside} ({ordinals} after a number)")


def _cuts(parts, text):
    """The offsets in `text` at which `parts` (its sentences, in order) end,
    but the last."""
    cuts, at = set(), 0
    for part in parts[:-1]:
        at = text.index(part, at) + len(part)
        cuts.add(at)
    return cuts


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", nargs="?", help="a run folder, imported model or export")
    parser.add_argument("--runtime", help="default: the folder's own (as serve chooses)")
    parser.add_argument("--posts", type=int, default=150)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--splitters", action="store_true",
                        help="compare sentence splitters instead")
    parser.add_argument("--sentences", type=int, default=19000,
                        help="Ding sentences the splitters are compared on")
    args = parser.parse_args()
    if args.splitters:
        compare_splitters(args)
    elif args.run:
        compare_overhead(args)
    else:
        parser.error("give a run folder, or --splitters")


if __name__ == "__main__":
    main()
