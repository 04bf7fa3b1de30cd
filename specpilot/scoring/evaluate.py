"""Generate answers with one engine and judge them with a task's scorer (``specpilot score``)."""

import dataclasses

from specpilot.scoring.code_exec import ExecLimits

MAX_COMPLETION_CHARS = 4000  # kept per example in the record


def score_engine(engine, tokenizer, task, rows: list[dict], max_new_tokens: int,
                 limits: ExecLimits = ExecLimits(), progress=None) -> dict:
    """Greedy answers to ``rows`` (stopping at EOS) judged by ``task``: a score record's body.

    Args:
        engine: an ``Engine``.
        tokenizer: a ``tokenizers.Tokenizer`` (prompts in, completions out).
        task: a task module of ``specpilot.scoring`` (``load_task(name)``).
        rows: the dataset rows to score (``task.rows(limit)``).
        max_new_tokens: generation budget per answer.
        limits: limits for running generated code (humaneval, mbpp).
        progress: optional ``advance()`` callable, called once per row.
    """
    from specpilot.engines.engine import SamplingParams

    params = SamplingParams(max_new_tokens=max_new_tokens)
    examples = []
    for index, row in enumerate(rows):
        result = engine.generate(tokenizer.encode(task.prompt(row)).ids, params)
        completion = tokenizer.decode(result.tokens)
        verdict = (task.judge(row, completion, limits) if task.EXECUTES_CODE
                   else task.judge(row, completion))
        examples.append({"index": index, "task_id": task.task_id(row), **verdict.to_dict(),
                         "num_tokens": len(result.tokens), "tau": result.tau,
                         "completion": completion[:MAX_COMPLETION_CHARS]})
        if progress is not None:
            progress()
    num_correct = sum(e["correct"] for e in examples)
    return {"dataset": task.NAME, "num_examples": len(examples), "num_correct": num_correct,
            "accuracy": num_correct / len(examples) if examples else 0.0,
            "max_new_tokens": max_new_tokens, "limits": dataclasses.asdict(limits),
            "acceptance": "measured", "examples": examples}
