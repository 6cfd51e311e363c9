"""The XAIguiFormer model: rotary encodings, connectome tokenizer, XAI-guided transformer.

Public API: :class:`ModelConfig`, :class:`XAIguiFormer`, :class:`ModelOutput`.
"""

from eegformer_cli.model.xaiguiformer import PRESETS, ModelConfig, ModelOutput, XAIguiFormer

__all__ = ["PRESETS", "ModelConfig", "ModelOutput", "XAIguiFormer"]
