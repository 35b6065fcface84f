"""The released file: the task vector artifact, its privacy claim, its model card and signature."""
