"""pdeladder.dataset"""
