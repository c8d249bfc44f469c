"""The reference-based reward model (the verifier): its input format (`input`), batched scoring
and held-out evaluation (`scoring`), the one loader of both its trainers (`load`) and their one
optimiser builder (`optim`), its half of the compiled step (`step`), Cooper's pairs for its
co-training (`cooper`), and VerifyRM training (`train`, coop-train-rm)."""
