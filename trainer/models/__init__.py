"""pdeladder.trainer.models"""
