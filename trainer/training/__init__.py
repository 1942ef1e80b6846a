"""pdeladder.trainer.training"""
