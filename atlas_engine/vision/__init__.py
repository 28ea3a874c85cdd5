"""Images in: vision transformers, their inputs and their attention maps (issue 55)."""
