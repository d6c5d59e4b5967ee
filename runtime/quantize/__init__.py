"""Making a smaller GGUF of a model: importance, sensitivity, bit allocation, quality."""
