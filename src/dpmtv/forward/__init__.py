"""The forward pass: everything that runs prompts through the model and reads the heads' outputs
(hooks, chunk extraction, fixed shapes, prompt budgets, the executor and the input pipeline)."""
