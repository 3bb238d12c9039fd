"""Holmes reference model: a GMMFormer-style PRVR model trained with the Holmes objective end to end."""
