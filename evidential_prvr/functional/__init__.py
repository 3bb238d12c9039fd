"""Pure tensor functions: one per equation, typed, stateless and free of I/O."""

# Evidence, opinions and uncertainties (Holmes Eq. 3-18)

# Entropic optimal transport (Holmes Eq. 19-20, App. B.5)

# Basic retrieval losses (Holmes App. B.1)

# Gaussian embeddings (DAB, HUD)
