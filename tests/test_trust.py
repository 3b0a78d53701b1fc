"""How far to trust a translation, the plain-Python part (`trust`): loops,
runaways, copies and omissions told from good translations, as users'
reports show them; the calibrator against an independent fit (SciPy's
optimizer), saved, loaded and refused for another model; AUROC and
calibration error against their definitions."""

import json
import os

import numpy as np
import pytest
import scipy.optimize

from keras_transformer import trust

# (source, translation, the loop's unit, its copies): the runaways users and
# this project's own runs met (issue 81).
LOOPS = [
    ("Ich bin zu alt für diese Art von Abenteuer.", "I'm a old old old age.", ("old",), 3),
    ("Die Nachrichten-App funktioniert traumhaft gut auf allen Plattformen.",
     "The news news news is well-minded by all the news.", ("news",), 3),
    ("Mein Nachbar fährt einen silberfarbenen Ford Focus, Baujahr 2012.",
     "My neighbourhood is a 201, 201, 201, 201, 202.", ("201", ","), 4),
    ("Baseball-Fanghandschuh", "ball ball ball shoe", ("ball",), 3),
    ("Salat", "salad salad salad salad salad salad", ("salad",), 6),
    ("cada vez", "cada vez cada vez cada vez cada vez", ("cada", "vez"), 4),
    ("Es tut mir leid.", "I'm sorry I'm sorry I'm sorry", ("I", "'", "m", "sorry"), 3),
    ("vor", "pre- pre- pre- pre-", ("pre", "-"), 4),
]
# Repetitions that are not loops: the source repeats as often, or twice is
# how the language says it.
NOT_LOOPS = [
    ("und und und", "and and and"),
    ("sehr sehr gut", "very very good"),
    ("Ha ha ha ha!", "Ha ha ha ha!"),
    ("Das Haus ist groß, das Haus ist alt.", "The house is big, the house is old."),
    ("Wo ist der Bahnhof?", "Where is the station?"),
]


@pytest.mark.parametrize("source, translation, unit, copies", LOOPS)
def test_loops_are_found_with_their_unit_and_copies(source, translation, unit, copies):
    loop = trust.loop_of(source, translation)
    assert loop is not None and loop.unit == unit and loop.copies == copies
    cut = trust.cut_before_loop(translation, loop)
    assert translation.startswith(cut) and trust.loop_of(source, cut) is None
    assert len(trust.words_of(cut)) == loop.start + len(unit)  # the first copy kept
    assert "repetition" in trust.text_flags(source, translation, 10, 10)


@pytest.mark.parametrize("source, translation", NOT_LOOPS)
def test_repetition_the_source_has_or_the_language_uses_is_no_loop(source, translation):
    assert trust.loop_of(source, translation) is None
    assert "repetition" not in trust.text_flags(source, translation, 10, 10)


def test_the_loop_with_most_copies_earliest_and_shortest_is_the_one_found():
    words = trust.words_of("a b a b a b c c c c")
    assert trust.find_loop(words) == trust.Loop(6, ("c",), 4)
    words = trust.words_of("x y x y x y z z z")  # as many copies: the earlier
    assert trust.find_loop(words) == trust.Loop(0, ("x", "y"), 3)
    assert trust.find_loop(trust.words_of("o o o o")) == trust.Loop(0, ("o",), 4)
    assert trust.most_copies("no repetition here") == 1


def test_an_output_runs_away_at_its_limit_or_far_longer_than_its_source():
    assert trust.ran_away(5, 9, limit=10)  # the end token was the tenth
    assert not trust.ran_away(5, 8, limit=10)
    bound = trust.RUNAWAY_RATIO * 4 + trust.RUNAWAY_SLACK
    assert trust.ran_away(4, int(bound) + 1, limit=None)
    assert not trust.ran_away(4, int(bound), limit=None)


@pytest.mark.parametrize("source, translation, copy", [
    ("Hallo Welt, wie geht es?", "Hallo Welt wie geht es", True),
    ("HALLO WELT WIE GEHT ES", "hallo welt wie geht es?", True),
    ("Hallo Welt, wie geht es?", "Hello world, how are you?", False),
    ("Berlin", "Berlin", False),  # a name: nothing to translate
    ("Max Planck", "Max Planck", False),
    ("Siehe https://example.com/ein-langer-weg", "See https://example.com/ein-langer-weg", False),
    ("https://example.com/eins-zwei-drei-vier", "https://example.com/eins-zwei-drei-vier", False),
    ("a.b@example.com", "a.b@example.com", False),
    ("12 345 678", "12 345 678", False),
    ("🪨", "🪨", False),
])
def test_a_copy_is_the_source_given_back_where_it_has_words_to_translate(source, translation,
                                                                          copy):
    assert trust.is_copy(source, translation) is copy


def test_untranslated_is_read_by_the_detector_given_and_only_then():
    detect = lambda text: "de" if "Haus" in text else "en"  # noqa: E731
    source = "Das Haus ist sehr groß."
    assert "untranslated" in trust.text_flags(source, "Das Haus ist groß.", 6, 5, None, "de",
                                              detect)
    assert "untranslated" not in trust.text_flags(source, "The house is big.", 6, 5, None, "de",
                                                  detect)
    assert "untranslated" not in trust.text_flags(source, "Das Haus ist groß.", 6, 5)
    # Too few words to tell a language by.
    assert "untranslated" not in trust.text_flags(source, "Haus", 6, 1, None, "de", detect)


def test_omitted_words_are_those_whose_pieces_the_translation_hardly_attends_to():
    source = "Der große Hund bellt ."
    pieces = ["▁Der", "▁gro", "ße", "▁Hund", "▁bell", "t", "▁."]
    fair = 8 / (len(pieces) + 1)  # 8 target tokens over 7 pieces and the end token
    received = [fair] * len(pieces)
    assert trust.omitted_words(source, pieces, received, 8) == []
    # "große" gets a twentieth of its share across its two pieces.
    received[1] = received[2] = fair / 20
    assert trust.omitted_words(source, pieces, received, 8) == ["große"]
    # Punctuation is never omitted.
    received[6] = 0.0
    assert trust.omitted_words(source, pieces, received, 8) == ["große"]


def _chrf_data(seed=0, rows=600):
    """Signals of three kinds and a sentence chrF made of them and noise."""
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(rows, 3)) * [1.0, 5.0, 0.2] + [0.0, 10.0, -1.0]
    chrf = 30 + 8 * features[:, 0] - 1.5 * (features[:, 1] - 10) + 20 * (features[:, 2] + 1) \
        + rng.normal(scale=6, size=rows)
    return features, chrf


def test_the_regression_is_ridge_in_closed_form_and_the_curve_scipys_fit():
    features, chrf = _chrf_data()
    calibrator = trust.Calibrator.fit(("a", "b", "c"), features, chrf, "digest", alpha=0.6)
    x = (features - calibrator.mean) / calibrator.scale
    # Ridge as least squares on rows augmented with sqrt(penalty) * I.
    augmented = np.vstack([np.hstack([x, np.ones((600, 1))]),
                           np.hstack([np.sqrt(calibrator.PENALTY) * np.eye(3), np.zeros((3, 1))])])
    theta = np.linalg.lstsq(augmented, np.append(chrf, np.zeros(3)), rcond=None)[0]
    np.testing.assert_allclose(calibrator.weights, theta[:3], atol=1e-8)
    assert abs(calibrator.bias - theta[3]) < 1e-8
    # The curve: the penalized likelihood its docstring states, minimized by SciPy.
    predicted = np.random.default_rng(3).normal(30, 8, size=400)
    good = np.random.default_rng(4).random(400) < 1 / (1 + np.exp(-(predicted - 40) / 4))
    slope, intercept = trust._logistic(predicted, good)
    center, spread = predicted.mean(), predicted.std()

    def loss(t):
        z = np.append(t[0] * (predicted - center) / spread + t[1], [t[1], t[1]])
        y, w = np.append(good, [1, 0]), np.append(np.ones(400), [0.5, 0.5])
        return np.sum(w * (np.logaddexp(0, z) - y * z)) + 0.5e-3 * np.sum(t ** 2)

    best = scipy.optimize.minimize(loss, np.zeros(2), method="BFGS", options={"gtol": 1e-9}).x
    assert abs(slope - best[0] / spread) < 1e-5
    assert abs(intercept - (best[1] - best[0] * center / spread)) < 1e-4


def test_the_confidence_is_calibrated_and_ranks_sentences_it_was_not_fitted_on():
    features, chrf = _chrf_data(seed=0)
    calibrator = trust.Calibrator.fit(("a", "b", "c"), features, chrf, "digest", alpha=0.6)
    fresh, fresh_chrf = _chrf_data(seed=1, rows=4000)
    confidence = calibrator.confidence(fresh)
    good = fresh_chrf >= trust.TARGET
    assert 0.1 < good.mean() < 0.6
    assert trust.calibration_error(confidence, good) < 0.03
    assert abs(confidence.mean() - good.mean()) < 0.02
    # It ranks as well as the chrF the signals make without noise.
    truth = 30 + 8 * fresh[:, 0] - 1.5 * (fresh[:, 1] - 10) + 20 * (fresh[:, 2] + 1)
    assert trust.auroc(confidence, good) > trust.auroc(truth, good) - 0.01
    report = calibrator.report
    assert report["sentences"] == 600 and report["folds"] == 5
    assert report["auroc"] > 0.9 and report["calibration_error"] < 0.05


def test_a_calibrator_of_a_model_without_a_good_translation_is_finite_and_low():
    features, chrf = _chrf_data()
    calibrator = trust.Calibrator.fit(("a", "b", "c"), features, chrf - 60, "d", 0.6)
    assert np.all(calibrator.confidence(features) < 0.01)
    with pytest.raises(ValueError, match="at least 50 held-out sentences"):
        trust.Calibrator.fit(("a",), np.zeros((20, 1)), np.zeros(20), "d", 0.6)


def test_the_calibrator_is_saved_loaded_and_refused_for_another_model(tmp_path):
    features, chrf = _chrf_data()
    calibrator = trust.Calibrator.fit(("a", "b", "c"), features, chrf, "digest-1", alpha=1.5)
    assert trust.Calibrator.load(tmp_path) is None
    calibrator.save(tmp_path)
    assert os.listdir(tmp_path) == [trust.CALIBRATION_FILE]
    loaded = trust.Calibrator.load(tmp_path, "digest-1", ("a", "b", "c"))
    np.testing.assert_array_equal(loaded.confidence(features), calibrator.confidence(features))
    assert loaded.alpha == 1.5 and loaded.report == calibrator.report
    with pytest.raises(ValueError, match="fitted for another model") as error:
        trust.Calibrator.load(tmp_path, "digest-2")
    assert "\n" not in str(error.value) and "keras-transformer calibrate" in str(error.value)
    with pytest.raises(ValueError, match="other signals"):
        trust.Calibrator.load(tmp_path, "digest-1", ("a", "b"))
    path = tmp_path / trust.CALIBRATION_FILE
    kept = json.loads(path.read_text())
    for damage in ('{"signals": ', json.dumps(kept | {"weights": [1.0]}),
                   json.dumps({k: v for k, v in kept.items() if k != "slope"})):
        path.write_text(damage)
        with pytest.raises(ValueError, match="is damaged") as error:
            trust.Calibrator.load(tmp_path)
        assert "\n" not in str(error.value)


def test_auroc_and_calibration_error_are_their_definitions():
    rng = np.random.default_rng(1)
    scores = np.round(rng.random(300), 1)  # many ties
    positive = rng.random(300) < scores
    pairs = [(a > b) + 0.5 * (a == b) for a in scores[positive] for b in scores[~positive]]
    assert abs(trust.auroc(scores, positive) - np.mean(pairs)) < 1e-12
    confidence = rng.random(1000)
    good = rng.random(1000) < confidence
    bins = np.minimum((confidence * 10).astype(int), 9)
    expected = sum((bins == b).mean() * abs(good[bins == b].mean() - confidence[bins == b].mean())
                   for b in range(10) if (bins == b).any())
    assert abs(trust.calibration_error(confidence, good) - expected) < 1e-12
    assert trust.calibration_error(confidence, good) < 0.05  # drawn calibrated
