"""The XAIguiFormer model: rotary encodings, connectome tokenizer, XAI-guided transformer.

Internal to eegformer, like every subpackage (the public API is ``eegformer_cli.__all__``);
the package's own entry points: :class:`ModelConfig`, :class:`XAIguiFormer`, :class:`ModelOutput`.
"""

from eegformer_cli.model.xaiguiformer import PRESETS, ModelConfig, ModelOutput, XAIguiFormer

__all__ = ["PRESETS", "ModelConfig", "ModelOutput", "XAIguiFormer"]
