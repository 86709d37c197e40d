"""The PyTorch importer (torch.export and .pt2 archives): data, control and op rules."""
