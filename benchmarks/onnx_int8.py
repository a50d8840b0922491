"""Does an int8 MiniLM keep SKR's decisions? Quantisation recipes for the ONNX export.

``SKRKnnGate`` (k=10) is fitted on AdaRAGUE NQ's 500 outcome records with the fp32
embedder, saved, and loaded with each int8 variant of the cached ONNX export
(``OnnxEmbedder``'s). On 500 NQ-open dev questions it reports, per recipe: how many
decisions equal the fp32 gate's (the bar for shipping a recipe: at least 99 %), the
same for a gate fitted with the int8 embedder throughout, the least and median
cosine to the fp32 vectors, and the single-question embedding median (recipes and
fp32 timed interleaved question by question). Recipes (onnxruntime.quantization,
weights of the MatMuls only, the rest fp32):

- dynamic int8 weights, per tensor (onnxruntime's default) and per channel;
- dynamic per channel with each layer's attention output and feed-forward output
  projections kept fp32, with the last two layers kept fp32, or on the feed-forward
  projections only;
- static (QDQ) per channel, activations calibrated on 300 real AdaRAGUE questions
  (TriviaQA and SQuAD splits, never the NQ memory nor the dev questions), with and
  without the output projections kept fp32.

    .venv/bin/python benchmarks/onnx_int8.py [--data DIR]

Writes benchmarks/results/onnx_int8.{md,json}. Run with OMP_NUM_THREADS=1.
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnxruntime.quantization import (
    CalibrationDataReader,
    CalibrationMethod,
    QuantFormat,
    QuantType,
    quantize_dynamic,
    quantize_static,
)
from tqdm import tqdm

from _common import adarague_path, add_data_argument, markdown_table, write_results
from adaptive_gates import SKRKnnGate, load_outcomes, load_qa
from adaptive_gates.models import default_embedder, embedded_minilm_dir
from adaptive_gates.models.embedded import MINILM_ID
from adaptive_gates.models.embedding.onnx.export import cached_export, onnx_pipeline
from adaptive_gates.models.embedding.onnx.runner import OnnxPipeline

K = 10
QUESTIONS = 500
CALIBRATION = 300
SHIP_BAR = 0.99
LAYERS = 6


class PipelineEmbedder:
    """An ``Embedder`` over one ONNX file (the benchmark's int8 variants)."""

    model_id = MINILM_ID

    def __init__(self, pipeline: OnnxPipeline) -> None:
        self.pipeline = pipeline

    @property
    def dimension(self) -> int:
        return self.pipeline.pipeline.dimension

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.pipeline.embed(list(texts), normalize=True, batch_size=64)


class QuestionReader(CalibrationDataReader):  # type: ignore[misc]
    """Tokenised questions, one a batch, for static calibration."""

    def __init__(self, pipeline: OnnxPipeline, questions: list[str]) -> None:
        self._feeds: Iterator[dict[str, np.ndarray]] = (
            {
                name: np.asarray(value, dtype=np.int64)
                for name, value in pipeline.tokenizer([q], return_tensors="np").items()
                if name in pipeline.input_names
            }
            for q in questions
        )

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._feeds, None)


def weight_matmuls(model_file: Path) -> list[tuple[int, str, str]]:
    """(layer, node name, role) of each MatMul with a weight, in graph order; a layer's
    six are the query, key and value projections (``qkv``), the attention output
    (``attention-output``), the feed-forward input and output (``ffn-in``, ``ffn-out``)."""
    graph = onnx.load(str(model_file)).graph
    weights = {init.name for init in graph.initializer}
    nodes = [n for n in graph.node if n.op_type == "MatMul" and n.input[1] in weights]
    roles = ("qkv", "qkv", "qkv", "attention-output", "ffn-in", "ffn-out")
    if len(nodes) != LAYERS * len(roles):
        raise RuntimeError(f"expected {LAYERS * len(roles)} weight MatMuls, found {len(nodes)}")
    return [(i // len(roles), node.name, roles[i % len(roles)]) for i, node in enumerate(nodes)]


def recipes(fp32: Path, pipeline: OnnxPipeline, calibration: list[str]) -> dict[str, Callable[[Path], None]]:
    nodes = weight_matmuls(fp32)
    every = [name for _, name, _ in nodes]
    no_outputs = [name for _, name, role in nodes if role not in ("attention-output", "ffn-out")]
    feed_forward = [name for _, name, role in nodes if role.startswith("ffn")]
    early = [name for layer, name, _ in nodes if layer < LAYERS - 2]

    def dynamic(per_channel: bool, names: list[str]) -> Callable[[Path], None]:
        return lambda out: quantize_dynamic(
            fp32, out, per_channel=per_channel, weight_type=QuantType.QInt8, nodes_to_quantize=names
        )

    def static(names: list[str]) -> Callable[[Path], None]:
        return lambda out: quantize_static(
            fp32,
            out,
            QuestionReader(pipeline, calibration),
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            nodes_to_quantize=names,
            calibrate_method=CalibrationMethod.MinMax,
        )

    return {
        "dynamic, per tensor": dynamic(False, every),
        "dynamic, per channel": dynamic(True, every),
        "dynamic, per channel, output projections fp32": dynamic(True, no_outputs),
        "dynamic, per channel, last 2 layers fp32": dynamic(True, early),
        "dynamic, per channel, feed-forward only": dynamic(True, feed_forward),
        "static QDQ, per channel, calibrated": static(every),
        "static QDQ, per channel, calibrated, output projections fp32": static(no_outputs),
    }


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_data_argument(parser)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    load_start = os.getloadavg()[0]
    folder = embedded_minilm_dir()
    fp32_file = cached_export(folder)
    fp32 = PipelineEmbedder(onnx_pipeline(folder, fp32_file, threads=1))
    memory = load_outcomes(adarague_path(args.data, "nq"))
    asked = list(dict.fromkeys(r.question for r in load_qa(args.data / "nq_open_dev.jsonl")))[:QUESTIONS]
    calibration = [r.question for split in ("trivia", "squad") for r in load_outcomes(adarague_path(args.data, split))]
    calibration = list(dict.fromkeys(calibration))[:CALIBRATION]

    reference_gate = SKRKnnGate(default_embedder("torch"), k=K).fit_outcomes(memory)
    reference = [d.retrieve for d in reference_gate.decide_batch(asked)]
    reference_vectors = fp32.embed(asked)
    rows: list[dict[str, Any]] = []
    variants: dict[str, PipelineEmbedder] = {"fp32": fp32}
    with tempfile.TemporaryDirectory() as tmp:
        reference_gate.save(Path(tmp) / "gate")
        for name, quantise in tqdm(recipes(fp32_file, fp32.pipeline, calibration).items(), desc="recipes"):
            out = Path(tmp) / f"{len(variants)}.onnx"
            quantise(out)
            variants[name] = PipelineEmbedder(onnx_pipeline(folder, out, threads=1))
        for name, embedder in variants.items():
            loaded = SKRKnnGate.load(Path(tmp) / "gate", embedder=embedder)
            same = sum(d.retrieve == r for d, r in zip(loaded.decide_batch(asked), reference))
            own = SKRKnnGate(embedder, k=K).fit_outcomes(memory)
            same_own = sum(d.retrieve == r for d, r in zip(own.decide_batch(asked), reference))
            cosines = (embedder.embed(asked) * reference_vectors).sum(axis=1)
            rows.append(
                {
                    "recipe": name,
                    "same_decisions_saved_gate": same,
                    "same_decisions_refitted": same_own,
                    "min_cosine": float(cosines.min()),
                    "median_cosine": float(np.median(cosines)),
                }
            )
    times: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for i, question in enumerate(tqdm(asked, desc="timing")):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            times[name].append(timed(lambda: variants[name].embed([question])))
    for row in rows:
        row["embed_median_ms"] = float(np.median(times[row["recipe"]][20:]))
        row["ships"] = row["recipe"] != "fp32" and row["same_decisions_saved_gate"] >= SHIP_BAR * len(asked)
    table = markdown_table(
        [
            "recipe",
            "same decisions, torch-fitted gate",
            "same decisions, gate refitted",
            "least cosine",
            "median cosine",
            "embed median ms",
        ],
        [
            [
                r["recipe"],
                f"{r['same_decisions_saved_gate']}/{len(asked)}",
                f"{r['same_decisions_refitted']}/{len(asked)}",
                f"{r['min_cosine']:.5f}",
                f"{r['median_cosine']:.5f}",
                r["embed_median_ms"],
            ]
            for r in rows
        ],
    )
    load_end = os.getloadavg()[0]
    markdown = (
        f"# int8 MiniLM recipes and SKRKnnGate (k={K}) decisions\n\n"
        f"Memory: AdaRAGUE NQ train outcome records ({len(memory)}); {len(asked)} NQ-open dev questions; "
        "reference: the gate fitted with torch (fp32). One onnxruntime thread. "
        f"Load average {load_start:.2f} at start, {load_end:.2f} at the end (the machine is shared). "
        f"A recipe would ship with at least {SHIP_BAR:.0%} of the decisions unchanged; "
        f"shipping: {', '.join(r['recipe'] for r in rows if r['ships']) or 'none'}.\n\n" + table
    )
    print(markdown)
    results = {"memory": len(memory), "questions": len(asked), "load_average": [load_start, load_end], "rows": rows}
    for path in write_results("onnx_int8", markdown, results):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
