"""Circuit discovery on TransformerLens 4 models: edge graphs, discovery methods, ground truth, scoring."""
