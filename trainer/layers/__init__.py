"""pdeladder.trainer.layers"""
