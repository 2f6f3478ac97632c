"""Chapter 06's second exercise: a tensor-parallel block graded on its property (the student chooses the
splits) and a sequence-parallel MLP sub-layer (Korthikanti's g and g-bar, LayerNorm's gradients reduced)."""
