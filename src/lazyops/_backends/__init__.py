"""The built-in backends: one package each, every kernel a module of the same name in each."""
