"""The capstone: the student's own pieces (chapters 03, 05, 06) composed into DP x TP x PP training.

``load_pieces`` reads the answers from the student's notebooks; ``run_capstone`` trains on 8 CPU ranks.
"""

from .loader import PIECES, LoadedPiece, load_pieces
from .run import LAYERS, MESH_NAMES, MESH_SHAPE, Pieces, run_capstone, single_process_losses

__all__ = ["LAYERS", "MESH_NAMES", "MESH_SHAPE", "PIECES", "LoadedPiece", "Pieces", "load_pieces",
           "run_capstone", "single_process_losses"]
