"""Image-feature extraction: Flax VGG16 / VGG19 / ViT-B/16 with torchvision weights, writing
the stores `vqajax.data.features.FeatureStore` reads (`python -m data_pipeline.features`)."""
