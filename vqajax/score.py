"""`vqajax-score`: the official VQA accuracy of a results file, fast and strict.

    vqajax-score --questions Q.json --annotations A.json --results R.json \\
        [--per-question FILE] [--multiple-choice] [--out FILE]

Prints the official `accuracy` dict (`overall`, `perQuestionType`, `perAnswerType`,
percentages rounded to 2 decimals); `--out` also writes it to FILE and `--per-question`
writes the official `evalQA` ({question_id: percent}). Numbers are identical to the
official `vqaEval.py` (see `vqajax.metrics.reference`); each distinct string is
normalised once and the rest is vectorised numpy.

Stricter than the official tools: any malformed input is one line on stderr naming the
file, the record and what was expected, with exit status 2 and no output written.
Where the official silently keeps the last of several results for one question_id, we
reject duplicate question ids; we also require the questions and annotations files to
cover the same question ids, and every annotation to have at least one answer.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import itertools
import json
import operator
import os
import sys
from typing import Any, Callable, Collection, Iterator, Sequence

import numpy as np

from vqajax.metrics.vqa_accuracy import (Interner, aggregate_official, encode_predictions,
                                         encode_targets, percent_per_question,
                                         question_accuracy_exact)

_SHOW_IDS = 5


class InputError(Exception):
    """Malformed user input; the message is one line naming the file and record."""


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic GC: JSON trees are acyclic, and with millions of live containers
    its repeated full passes would double the loading time."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _some(ids: Collection[int]) -> str:
    shown = sorted(ids)[:_SHOW_IDS]
    return ', '.join(map(str, shown)) + (', ...' if len(ids) > _SHOW_IDS else '')


def load_json(path: str) -> Any:
    try:
        with open(path, 'rb') as f:
            return json.loads(f.read())
    except OSError as e:
        raise InputError(f'{path}: cannot read: {e.strerror}') from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputError(f'{path}: not valid JSON: {e}') from None


def _records(path: str, data: Any, key: str) -> list[Any]:
    """The non-empty list under `key` of a top-level object (the official files' layout)."""
    if not isinstance(data, dict) or not isinstance(data.get(key), list) or not data[key]:
        raise InputError(f'{path}: expected a JSON object with a non-empty "{key}" list')
    return data[key]


def _column(records: list[Any], key: str, types: set[type], expected: str,
            where: Callable[[int], str]) -> list[Any]:
    """[record[key]] checked to be objects holding `types` (exact JSON types, so bool is no
    int). Checked in bulk; record by record only to name the first bad record."""
    try:
        values = list(map(operator.itemgetter(key), records))
    except (TypeError, KeyError):
        values = None
    if values is None or not set(map(type, values)) <= types:
        for k, record in enumerate(records):
            if not isinstance(record, dict):
                raise InputError(f'{where(k)}: expected an object, got {type(record).__name__}')
            if type(record.get(key)) not in types:
                raise InputError(f'{where(k)}: expected {expected} "{key}", '
                                 f'got {record.get(key)!r}')
    return values


def _question_ids(path: str, records: list[Any], what: str) -> list[int]:
    """The records' question ids, checked to be unique integers."""
    ids = _column(records, 'question_id', {int}, 'an integer', lambda i: f'{path}: {what}[{i}]')
    if len(set(ids)) != len(ids):
        first: dict[int, int] = {}
        for i, qid in enumerate(ids):
            if first.setdefault(qid, i) != i:
                raise InputError(f'{path}: {what}[{i}]: duplicate question_id {qid} '
                                 f'(first at {what}[{first[qid]}])')
    return ids


def read_questions(path: str) -> list[dict[str, Any]]:
    """Question records of an official questions file (ids checked, unique)."""
    questions = _records(path, load_json(path), 'questions')
    _question_ids(path, questions, 'questions')
    return questions


def read_annotations(path: str) -> list[dict[str, Any]]:
    """Annotation records of an official annotations file, checked for what scoring reads."""
    annotations = _records(path, load_json(path), 'annotations')
    ids = _question_ids(path, annotations, 'annotations')

    def where(i: int) -> str:
        return f'{path}: annotations[{i}] (question_id {ids[i]})'

    _column(annotations, 'question_type', {str}, 'a string', where)
    _column(annotations, 'answer_type', {str}, 'a string', where)
    answer_lists = _column(annotations, 'answers', {list}, 'a list', where)
    counts = np.fromiter(map(len, answer_lists), np.int64, len(answer_lists))
    if not counts.all():
        raise InputError(f'{where(int(np.argmin(counts)))}: expected at least one answer')
    starts = np.cumsum(counts) - counts

    def where_answer(k: int) -> str:
        i = int(np.searchsorted(starts, k, side='right')) - 1
        return f'{where(i)}: answers[{k - starts[i]}]'

    _column(list(itertools.chain.from_iterable(answer_lists)), 'answer', {str}, 'a string',
            where_answer)
    return annotations


def check_same_questions(questions_path: str, questions: list[dict[str, Any]],
                         annotations_path: str, annotations: list[dict[str, Any]]) -> None:
    question_ids = {q['question_id'] for q in questions}
    annotation_ids = {a['question_id'] for a in annotations}
    for path, extra, other in ((questions_path, question_ids - annotation_ids, annotations_path),
                               (annotations_path, annotation_ids - question_ids, questions_path)):
        if extra:
            raise InputError(f'{path}: {len(extra)} question ids are missing from {other}: '
                             f'{_some(extra)}')


def read_results(path: str, annotations: list[dict[str, Any]]) -> dict[int, str]:
    """{question_id: answer} of a results file covering exactly the annotated questions."""
    records = load_json(path)
    if not isinstance(records, list):
        raise InputError(f'{path}: expected a JSON list of {{"question_id", "answer"}} objects, '
                         f'got {type(records).__name__}')
    ids = _question_ids(path, records, 'results')
    answers = _column(records, 'answer', {str}, 'a string',
                      lambda i: f'{path}: results[{i}] (question_id {ids[i]})')
    results = dict(zip(ids, answers))
    expected = {a['question_id'] for a in annotations}
    missing = expected - results.keys()
    if missing:
        raise InputError(f'{path}: no result for {len(missing)} of {len(expected)} annotated '
                         f'question ids: {_some(missing)}')
    unknown = results.keys() - expected
    if unknown:
        raise InputError(f'{path}: {len(unknown)} question ids are not in the annotations: '
                         f'{_some(unknown)}')
    return results


def check_multiple_choice(results_path: str, results: dict[int, str], questions_path: str,
                          questions: list[dict[str, Any]]) -> None:
    """Every answer must be one of its question's `multiple_choices` (as given, uncleaned)."""
    for q in questions:
        choices = q.get('multiple_choices')
        if not isinstance(choices, list) or not all(isinstance(c, str) for c in choices):
            raise InputError(f'{questions_path}: question_id {q["question_id"]}: expected a '
                             f'"multiple_choices" list of strings (needed by --multiple-choice)')
        answer = results[q['question_id']]
        if answer not in choices:
            raise InputError(f'{results_path}: question_id {q["question_id"]}: answer '
                             f'{answer!r} is not one of its {len(choices)} multiple_choices')


def evaluate_files(questions_path: str, annotations_path: str, results_path: str,
                   multiple_choice: bool = False) -> tuple[dict[str, Any], dict[int, float]]:
    """Official (`accuracy`, `evalQA`) of a results file; raises InputError on bad input."""
    with _gc_paused():
        return _evaluate_files(questions_path, annotations_path, results_path, multiple_choice)


def _evaluate_files(questions_path: str, annotations_path: str, results_path: str,
                    multiple_choice: bool) -> tuple[dict[str, Any], dict[int, float]]:
    questions = read_questions(questions_path)
    annotations = read_annotations(annotations_path)
    check_same_questions(questions_path, questions, annotations_path, annotations)
    results = read_results(results_path, annotations)
    if multiple_choice:
        check_multiple_choice(results_path, results, questions_path, questions)
    interner = Interner()
    targets = encode_targets(annotations, interner,
                             max_answers=max(len(a['answers']) for a in annotations))
    question_ids = [a['question_id'] for a in annotations]
    pred_ids = encode_predictions([results[q] for q in question_ids], targets['unanimous'],
                                  interner)
    acc = question_accuracy_exact(pred_ids, targets['gt_ids'], targets['gt_dup'],
                                  targets['gt_valid'])
    accuracy = aggregate_official(acc, [a['question_type'] for a in annotations],
                                  [a['answer_type'] for a in annotations])
    return accuracy, dict(zip(question_ids, percent_per_question(acc)))


def write_json_atomic(outputs: dict[str, Any]) -> None:
    """Write {path: object} as JSON; files appear whole or not at all (temp + os.replace)."""
    temps: dict[str, str] = {}
    path = ''
    try:
        for path, obj in outputs.items():
            head, tail = os.path.split(path)
            temp = os.path.join(head, f'.{tail}.{os.getpid()}.tmp')
            with open(temp, 'x') as f:
                temps[path] = temp
                json.dump(obj, f)
        for path, temp in temps.items():
            os.replace(temp, path)
    except OSError as e:
        raise InputError(f'{path}: cannot write: {e.strerror}') from None
    finally:
        for temp in temps.values():
            if os.path.exists(temp):
                os.remove(temp)


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog='vqajax-score', description=__doc__.split('\n')[0])
    parser.add_argument('--questions', required=True, help='official questions JSON')
    parser.add_argument('--annotations', required=True, help='official annotations JSON')
    parser.add_argument('--results', required=True, help='results JSON [{question_id, answer}]')
    parser.add_argument('--per-question', metavar='FILE', help='write {question_id: accuracy}')
    parser.add_argument('--multiple-choice', action='store_true',
                        help="check every answer is one of its question's multiple_choices")
    parser.add_argument('--out', metavar='FILE', help='also write the accuracy JSON here')
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    try:
        accuracy, per_question = evaluate_files(args.questions, args.annotations, args.results,
                                                args.multiple_choice)
        outputs: dict[str, Any] = {}
        if args.out:
            outputs[args.out] = accuracy
        if args.per_question:
            outputs[args.per_question] = per_question
        write_json_atomic(outputs)
    except InputError as e:
        print(f'vqajax-score: error: {e}', file=sys.stderr)
        return 2
    print(json.dumps(accuracy, indent=2))
    return 0


if __name__ == '__main__':
    sys.exit(main())
