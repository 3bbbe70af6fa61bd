"""What every layer decoder builds on: Arrow column builders, gathers of header bytes, spans, and the compiled walk."""
