"""Operations on whole stores: adopt a broker's store, expire (retention), inspect.
"""
