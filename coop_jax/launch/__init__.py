"""Process launchers: `coop_jax.launch.local` starts a multi-process run on one machine.

This package imports nothing else from coop_jax (and no JAX): a launcher only prepares the
environment its child processes initialise `jax.distributed` from.
"""
