"""Training jobs: `python -m train.dcgan`, and later `python -m train.tacotron2`."""
