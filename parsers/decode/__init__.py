"""The two decoders (fast columnar, per-frame reference), their column builders and the compiled walk."""
