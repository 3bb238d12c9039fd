"""The CLIP encoder of ``index`` and ``search``: an ``open_clip`` model, its frame, sentence and token features.

A model is named by an ``open_clip`` model name (``ViT-B-32``), a JSON model configuration file (the format
of ``open_clip``'s own ``model_configs``) or :data:`BUNDLED_MODEL`, the small encoder this package ships; its
weights by a ``pretrained`` tag (downloaded and cached by ``open_clip`` on the user's machine), a local
weights file, ``"none"`` (a model created without weights, its initial weights drawn from a recorded seed),
or, for the bundled model, :data:`BUNDLED_WEIGHTS` (its weights trained on the generated world by
:mod:`reference_models.videos.train_encoder`, in the package: nothing is downloaded). :class:`EncoderSpec`
records all of it with a digest of the weights, so that ``search`` encodes its queries with the very encoder
the gallery was indexed with, or refuses.

Frame features are ``encode_image`` of each frame ([n, D]). Sentence features are ``encode_text`` (what a
zero-shot search compares with the frames). Caption features for training are per token, as the MS-SL
lineage's RoBERTa features are: the text tower's output at every position from the start token to the end
token, after its final norm and projection, so that the end token's row is CLIP's sentence embedding.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = ["EncoderSpec", "ClipEncoder", "EncoderError", "BUNDLED_MODEL", "BUNDLED_WEIGHTS", "bundled_files"]

#: The small encoder this package ships (``encoders/prvr-tiny.json``, open_clip's configuration format).
BUNDLED_MODEL = "prvr-tiny"
#: The ``pretrained`` tag of its weights trained on the generated world (``encoders/prvr-tiny-generated-world.*``).
BUNDLED_WEIGHTS = "generated-world"
_ENCODERS = Path(__file__).resolve().parent / "encoders"


def bundled_files() -> dict[str, Path]:
    """The bundled encoder's files: ``config`` (JSON), ``weights`` (safetensors) and ``record`` (how they were made)."""
    stem = f"{BUNDLED_MODEL}-{BUNDLED_WEIGHTS}"
    return {"config": _ENCODERS / f"{BUNDLED_MODEL}.json", "weights": _ENCODERS / f"{stem}.safetensors",
            "record": _ENCODERS / f"{stem}.json"}


class EncoderError(ValueError):
    """The encoder cannot be created or is not the recorded one (a problem the user can fix)."""


@dataclass(frozen=True)
class EncoderSpec:
    """Everything that identifies the encoder of a gallery (written to its ``gallery.json``).

    Attributes
    ----------
    model : str
        ``open_clip`` model name, or the name of the JSON configuration copied into the gallery.
    pretrained : str
        ``open_clip`` tag, local weights file, or ``"none"``.
    seed : int
        Seed of the initial weights when ``pretrained`` is ``"none"``.
    image_size : int
        Side of the square frames the model takes.
    mean, std : tuple of float
        Per-channel normalisation of the frames.
    frame_dim, token_dim : int
        Widths of the frame and token features.
    weights_sha256 : str
        Digest of every parameter and buffer (in ``state_dict`` order).
    """

    model: str
    pretrained: str
    seed: int
    image_size: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    frame_dim: int
    token_dim: int
    weights_sha256: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EncoderSpec:
        values = dict(data)
        values["mean"], values["std"] = tuple(values["mean"]), tuple(values["std"])
        return cls(**values)


def _weights_digest(model: torch.nn.Module) -> str:
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def _register_config(model: str) -> str:
    """``model`` itself, or the name under which a JSON configuration file was registered with ``open_clip``."""
    import open_clip

    if model == BUNDLED_MODEL:
        open_clip.add_model_config(bundled_files()["config"])
        return model
    path = Path(model)
    if path.suffix != ".json":
        return model
    if not path.is_file():
        raise EncoderError(f"--model {model}: no such model configuration file")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise EncoderError(f"--model {model}: not a JSON model configuration ({exc})") from None
    if not isinstance(config, dict) or not {"embed_dim", "vision_cfg", "text_cfg"} <= set(config):
        raise EncoderError(f"--model {model}: an open_clip model configuration needs embed_dim, vision_cfg and text_cfg")
    open_clip.add_model_config(path)
    return path.stem


class ClipEncoder:
    """An ``open_clip`` CLIP model in eval mode on ``device``, encoding frames and caption tokens.

    Parameters
    ----------
    model : str
        ``open_clip`` model name, a JSON model configuration file, or :data:`BUNDLED_MODEL`.
    pretrained : str
        ``open_clip`` tag, local weights file, ``"none"`` (created without weights from ``seed``), or
        :data:`BUNDLED_WEIGHTS` with the bundled model.
    device : str or torch.device
        Where the model runs.
    seed : int
        Seed of the initial weights of a model created without weights.
    """

    def __init__(self, model: str, pretrained: str, *, device: str | torch.device = "cpu", seed: int = 0) -> None:
        import open_clip

        name = _register_config(model)
        if name not in open_clip.list_models():
            raise EncoderError(f"--model {model}: not an open_clip model (open_clip.list_models() lists them)")
        weights = None if pretrained == "none" else pretrained
        if pretrained == BUNDLED_WEIGHTS:
            if name != BUNDLED_MODEL:
                raise EncoderError(f"--pretrained {pretrained}: the bundled weights are those of --model "
                                   f"{BUNDLED_MODEL}, got --model {model}")
            weights = str(bundled_files()["weights"])
            if not Path(weights).is_file():
                raise EncoderError(f"--pretrained {pretrained}: the bundled weights {weights} are missing from this "
                                   "installation (train them: python -m reference_models.videos.train_encoder)")
        try:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                if weights is None:  # open_clip warns that no weights were loaded: here that is what was asked
                    logging.disable(logging.WARNING)
                try:
                    clip = open_clip.create_model(name, pretrained=weights, device="cpu")
                finally:
                    logging.disable(logging.NOTSET)
        except RuntimeError as exc:  # an unknown tag, an unreadable or mismatched weights file
            raise EncoderError(f"--pretrained {pretrained}: {exc}") from None
        if not isinstance(clip, open_clip.model.CLIP):
            raise EncoderError(f"--model {model}: per-token caption features need a CLIP with its own text tower "
                               f"(open_clip.model.CLIP), got {type(clip).__name__}")
        self.model = clip.eval().to(device)
        self.device = torch.device(device)
        self.tokenizer = open_clip.get_tokenizer(name)
        cfg = clip.visual.preprocess_cfg
        size = cfg["size"]
        self.image_size = int(size if isinstance(size, int) else size[0])
        self._mean = torch.tensor(cfg["mean"], device=self.device).view(1, 3, 1, 1)
        self._std = torch.tensor(cfg["std"], device=self.device).view(1, 3, 1, 1)
        self.spec = EncoderSpec(
            model=name, pretrained=pretrained, seed=seed, image_size=self.image_size,
            mean=tuple(float(x) for x in cfg["mean"]), std=tuple(float(x) for x in cfg["std"]),
            frame_dim=int(clip.visual.output_dim), token_dim=int(clip.text_projection.shape[1]),
            weights_sha256=_weights_digest(clip),
        )

    def recorded_zero_shot(self) -> dict[str, Any] | None:
        """The zero-shot evidence the bundled encoder's record holds (``temperature``, ``source``,
        ``confidence_kind``, ``thresholds``: chosen on the generated world's held-out captions), or ``None``."""
        if (self.spec.model, self.spec.pretrained) != (BUNDLED_MODEL, BUNDLED_WEIGHTS):
            return None
        path = bundled_files()["record"]
        if not path.is_file():
            return None
        recorded = json.loads(path.read_text(encoding="utf-8")).get("zero_shot")
        return recorded if isinstance(recorded, dict) else None

    def check_matches(self, recorded: EncoderSpec) -> None:
        """Raise :class:`EncoderError` unless this encoder is the one ``recorded`` describes."""
        if self.spec != recorded:
            differ = [k for k, v in recorded.to_dict().items() if self.spec.to_dict()[k] != v]
            raise EncoderError(f"the encoder created here differs from the gallery's in {', '.join(differ)} "
                               "(another open_clip or torch version draws other initial weights for "
                               "--pretrained none); index again with this installation")

    @torch.no_grad()
    def encode_frames(self, frames: torch.Tensor) -> torch.Tensor:
        """``uint8 [n, S, S, 3]`` RGB frames -> ``float32 [n, frame_dim]`` image features."""
        x = frames.to(self.device, non_blocking=True).permute(0, 3, 1, 2).float().div_(255.0)
        x = (x - self._mean) / self._std
        return self.model.encode_image(x).float()

    @torch.no_grad()
    def encode_sentences(self, sentences: Sequence[str]) -> torch.Tensor:
        """``float32 [n, token_dim]`` L2-normalised sentence embeddings (``encode_text``) on the encoder's device."""
        tokens = self.tokenizer(list(sentences)).to(self.device)
        return torch.nn.functional.normalize(self.model.encode_text(tokens).float(), dim=-1)

    @torch.no_grad()
    def encode_tokens(self, sentences: Sequence[str]) -> list[np.ndarray]:
        """Per-token features of each sentence: ``float32 [L_i, token_dim]``, start token to end token."""
        model = self.model
        tokens = self.tokenizer(list(sentences)).to(self.device)
        x = model.token_embedding(tokens) + model.positional_embedding
        x = model.ln_final(model.transformer(x, attn_mask=model.attn_mask))
        x = x @ model.text_projection
        ends = tokens.argmax(dim=-1).tolist()  # the end token has the largest id of the vocabulary
        out = x.float().cpu().numpy()
        return [np.ascontiguousarray(out[i, : end + 1]) for i, end in enumerate(ends)]
