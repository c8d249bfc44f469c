"""SmolLM2-135M-Instruct on CPU: the real-model lane (`lane`, its report `report`) and the
real-model VerifyRM that Cooper starts from (`verifyrm`); docs/results/real_model."""
