"""Research projects built on the library, one package each (`reward_hacking`, `real_model`),
with the pieces they share: the offline RM corpus (`rm_corpus`) and the run store (`run_store`).
Nothing in the library imports them."""
