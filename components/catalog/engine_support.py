"""What each pinned engine image supports: one table, read by the policy pack's engine-argument rule.

A flag that the pinned image does not support fails only at run time, after a GPU node has been
bought and a model loaded. So the policy pack checks every rendered engine command line against
this table before anything deploys.

Minimal version (issue 13): a row per pinned engine image with the flags known NOT to work on it,
each with its source. The issue-12 branch carries a fuller table (an allow-list of supported flags
per image, and the paths each image carries) with the same ``ENGINE_IMAGES`` /
``engine_arg_problems`` interface; when the two meet, keep that table and keep
``unsupported_args`` below as its one-line wrapper.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from components.catalog import images


@dataclass(frozen=True)
class EngineImage:
    """What one pinned image accepts."""

    image: str
    unsupported_flags: Mapping[str, str] = field(default_factory=dict)
    """Flags this image cannot run as shipped, with the reason (cited)."""
    supported_flags: frozenset[str] | None = None
    """When set, the only flags the image is known to accept; ``None``: not enumerated."""
    source: str = ""


ENGINE_IMAGES: Mapping[str, EngineImage] = MappingProxyType(
    {
        row.image: row
        for row in (
            EngineImage(
                images.VLLM,
                {
                    # vLLM imports OpenTelemetry only when tracing is asked for; the vllm-openai image does
                    # not install opentelemetry-sdk/-api/-exporter-otlp, so the server exits at start with
                    # "OpenTelemetry is not installed" (vllm/tracing.py; vLLM issues #7679, #9340, #26491).
                    "--otlp-traces-endpoint": "the image lacks the OpenTelemetry packages and exits at start "
                    "(vLLM issues #7679, #9340, #26491); drop the flag or add an image layer that installs "
                    "opentelemetry-sdk, -api and -exporter-otlp",
                },
                source="docs.vllm.ai/en/v0.11.0/configuration/engine_args.html; vLLM issues #7679, #9340, #26491",
            ),
            EngineImage(
                images.TRITON_TRTLLM,
                {},
                source="Triton release compatibility matrix (25.09: TensorRT-LLM 1.0.0)",
            ),
        )
    }
)


def engine_arg_problems(image: str, args: Iterable[object]) -> list[str]:
    """One line per flag in ``args`` that ``image`` does not support (unknown image, or a known failure)."""
    row = ENGINE_IMAGES.get(image) or ENGINE_IMAGES.get(image.split("@", 1)[0])
    if row is None:
        return [f"{image} has no row in components/catalog/engine_support.py: pin one of {', '.join(ENGINE_IMAGES)}"]
    problems = []
    for arg in args:
        if not isinstance(arg, str) or not arg.startswith("--"):
            continue
        flag = arg.split("=", 1)[0]
        if flag in row.unsupported_flags:
            problems.append(f"{flag} on {image}: {row.unsupported_flags[flag]}")
        elif row.supported_flags is not None and flag not in row.supported_flags:
            problems.append(f"{flag} on {image}: not in the image's support table")
    return problems


def unsupported_args(image: str, args: Iterable[object]) -> list[str]:
    """The flags of ``args`` that the pinned ``image`` does not support (see ``engine_arg_problems``)."""
    return [p.split(" on ", 1)[0] for p in engine_arg_problems(image, args) if p.startswith("--")]
