"""pdeladder.curriculum"""
