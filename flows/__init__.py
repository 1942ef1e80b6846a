"""pdeladder.flows"""
