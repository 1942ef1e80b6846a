"""pdeladder.trainer.losses"""
