"""eegformer: explainable EEG brain-disorder classification (XAIguiFormer) from the shell."""

__version__ = "0.1.0"
