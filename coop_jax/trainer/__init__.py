"""The policy trainer (coop-train): one RL step is rollouts (`rollouts`: sample, decode, verify,
reward, Cooper's pairs) into a `TrainBatch` (`batch`), then one compiled update (`step`), driven by
`loop.Trainer`. The reward types are `rewards`; Cooper's pair building is `coop_jax.rm.cooper`,
beside the RM it trains; the SFT warm start is `sft`; the hack probes are `probes`."""
