import numpy as np
import pytest

from vqajax.core import text
from vqajax.core.official_files import Answer
from vqajax.vqa import text as vqa_text


def test_tokenize_lowercases_and_drops_punctuation():
  assert text.tokenize("What's the man HOLDING?") == ["what's", "the", "man", "holding"]
  assert text.tokenize("Is it 3:30, or 4?") == ["is", "it", "3", "30", "or", "4"]
  assert text.tokenize("  ?! ") == []


def test_vocab_min_count_orders_by_count_then_word_and_maps_rare_words_to_unk():
  tokens = [["a", "b", "c"], ["a", "b"], ["a", "d"]]
  vocab = text.Vocab.build(tokens, min_count=2)
  assert vocab.words == ["<pad>", "<unk>", "a", "b"]
  ids, lengths = vocab.encode([["b", "c", "a"], []], max_len=4)
  np.testing.assert_array_equal(ids, [[3, text.UNK, 2, 0], [0, 0, 0, 0]])
  np.testing.assert_array_equal(lengths, [3, 0])


def test_encode_keeps_the_first_max_len_words():
  vocab = text.Vocab.build([["w%d" % i for i in range(30)]])
  ids, lengths = vocab.encode([["w%d" % i for i in range(30)]], max_len=26)
  assert lengths[0] == 26 and ids.shape == (1, 26)
  assert vocab.words[ids[0, -1]] == "w25"


def test_coded_words_hash_each_word_once_and_cut_count_and_pick_positions():
  coded = text.Coded.of(iter([["a", "b", "a"], [], ["c", "a"]]))  # any iterable of lists
  assert coded.words == ["a", "b", "c"]
  np.testing.assert_array_equal(coded.codes, [0, 1, 0, 2, 0])
  np.testing.assert_array_equal(coded.lengths, [3, 0, 2])
  assert text.Coded.of(coded) is coded
  cut = coded.cut(2)  # "a b a" -> "a b"
  np.testing.assert_array_equal(cut.codes, [0, 1, 2, 0])
  np.testing.assert_array_equal(cut.lengths, [2, 0, 2])
  has, codes = coded.word_at(1)
  np.testing.assert_array_equal(has, [True, False, True])
  np.testing.assert_array_equal(codes, [1, 0])  # "b", then "a"
  assert coded.counts() == {"a": 3, "b": 1, "c": 1}
  assert coded.counts(codes) == {"a": 1, "b": 1}  # words that do not occur are left out
  vocab = text.Vocab.build(coded, min_count=2)
  assert vocab.words == ["<pad>", "<unk>", "a"]
  ids, lengths = vocab.encode(coded, max_len=2)
  np.testing.assert_array_equal(ids, [[2, text.UNK], [0, 0], [text.UNK, 2]])
  np.testing.assert_array_equal(lengths, [2, 0, 2])


def test_unique_codes_number_values_by_first_appearance():
  values, codes = text.unique_codes(iter(["x", 7, "x", (1, 2), 7.0]), np.int32)
  assert values == ["x", 7, (1, 2)]  # 7.0 == 7, as a dict sees them
  assert codes.dtype == np.int32
  np.testing.assert_array_equal(codes, [0, 1, 0, 2, 1])
  with pytest.raises(TypeError):
    text.unique_codes([[1], [1]])


def test_answer_table_top_k_by_frequency_ties_alphabetical():
  table = text.TopK.build(["yes", "no", "2", "yes", "no", "red"], k=3)
  assert table.answers == ["no", "yes", "2"]
  np.testing.assert_array_equal(table.index(["red", "yes", "2"]), [-1, 1, 2])


def test_confident_only_keeps_questions_with_five_confident_answers():
  def ann(qid, n_yes):
    return {"question_id": qid, "answers": [Answer("x", "yes" if i < n_yes else "maybe") for i in range(10)]}
  kept = vqa_text.confident_only([ann(1, 4), ann(2, 5), ann(3, 10)])
  assert [a["question_id"] for a in kept] == [2, 3]


def test_confident_only_relabels_with_the_most_frequent_confident_answer():
  answers = [Answer("red", "maybe")] * 4 + [Answer("blue", "yes")] * 3 + [Answer("green", "yes")] * 3
  ann = {"question_id": 7, "multiple_choice_answer": "red", "answers": answers}
  kept, = vqa_text.confident_only([ann], min_confident=5)
  # "red" is the most frequent answer overall but never confident; blue and green tie at
  # 3 and blue comes first
  assert kept["multiple_choice_answer"] == "blue" and len(kept["answers"]) == 6
  assert ann["multiple_choice_answer"] == "red" and len(ann["answers"]) == 10  # input untouched


def test_question_bag_bins_words_then_first_second_third_words():
  questions = [["what", "color", "is", "it"], ["what", "is", "it"], ["is", "it", "red"]]
  bag = vqa_text.QuestionBag.build(questions, words=3, lead=2)
  # word counts: is 3, it 3, what 2, color 1, red 1 -> top 3: is, it, what (bins 0..2)
  # first words: what 2, is 1 -> bins 3, 4; second: is, it (1 each; alphabetical) and color
  # -> top 2: color, is -> bins 5, 6; third: is, it, red -> it? counts 1 each: is, it -> 7, 8
  assert bag.size == 3 + 2 + 2 + 2
  ids = bag.indices([["what", "is", "red", "it"], ["red"]], max_len=3)
  assert ids.shape == (2, 6)
  # row 0: words what, is, red (cut at 3; "it" beyond max_len) -> 2, 0, -1;
  # leads: what -> 3; is (2nd) -> 6; red (3rd) -> not in [is, it] -> -1
  np.testing.assert_array_equal(ids[0], [2, 0, -1, 3, 6, -1])
  np.testing.assert_array_equal(ids[1], [-1, -1, -1, -1, -1, -1])
