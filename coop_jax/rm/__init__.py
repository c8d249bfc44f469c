"""The reference-based reward model (the verifier): its input format (`input`), batched scoring
and held-out evaluation (`scoring`), and VerifyRM training (`train`, coop-train-rm)."""
