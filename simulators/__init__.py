"""Test beds: the synthetic ImageCLEF/Flickr-scale collection and loaders for real data."""
