"""pdeladder.trainer"""
