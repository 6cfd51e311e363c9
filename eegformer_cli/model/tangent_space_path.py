"""The tangent-space path: the band covariances in the Riemannian tangent space, a logistic
regression, inside the model.

The torch twin of the tangent-space reference (``evaluation/tangent_space.py``), so that the
model file (its state as buffers, loaded with ``weights_only=True``) carries it. Its input is a
recording's band covariances, (B, K, C, C), V^2, float32 or float64, rank C - 1 after the
average reference (the connectome file's ``covariance``). Per band:

1. :func:`shrink`: pyRiemann's ``Shrinkage`` (:data:`SHRINKAGE` of the mean variance on the
   diagonal), which makes each matrix S positive definite;
2. :func:`tangent_vectors`: ``upper(logm(P^-1/2 S P^-1/2))`` at the band's mean point P
   (the Riemannian mean of the training matrices, passed in by the caller), C(C+1)/2 numbers
   per band in pyRiemann's ``upper`` order (row-major upper triangle, off-diagonal entries
   times sqrt(2)), bands side by side (band-major): (B, K C(C+1)/2), dimensionless;
3. the :class:`~eegformer_cli.model.linear_path.LinearPath` on those vectors: logits
   (B, n_classes).

The geometry is computed in float64 whatever the input's or the module's dtype: the mean
point's inverse square root (:attr:`TangentSpacePath.reference_invsqrt`, float64 (K, C, C))
stays float64 when the module is cast. The matrix logarithm (:func:`logm`) has its own backward
(the Daleckii-Krein formula), finite where eigenvalues coincide (at the mean point itself,
the identity after whitening), where the backward of ``torch.linalg.eigh`` divides by their
differences.

Attributions: Integrated Gradients (captum) of one class's logit from the raw covariance whose
shrunk matrix is the mean point (:func:`baseline_covariance`: its tangent vector is zero),
either onto the raw covariance entries (:func:`tangent_space_attributions`: a channel's variance
in the band on the diagonal, pairs' covariances off it) or onto each channel's log variance and
each pair's correlation (:func:`log_power_attributions`, what ``explain`` reports). A gain on one
channel's signal moves its log variance alone in the second coordinates, but its variance and
every covariance of its row in the first, so the first splits that channel's effect between its
power and its pairs.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn

from eegformer_cli.model.linear_path import LinearPath

#: pyRiemann's ``Shrinkage(shrinkage=0.1)``: the weight of the mean variance on the diagonal.
SHRINKAGE = 0.1
#: Below this relative gap (lambda_i - lambda_j) / lambda_j two eigenvalues count as equal in
#: the logarithm's backward, whose divided difference is then its first-order series.
EQUAL_EIGENVALUES = 1e-6


def shrink(covariance: Tensor, shrinkage: float = SHRINKAGE) -> Tensor:
    """(..., C, C) -> (..., C, C), same dtype and unit (V^2): ``(1 - s) X + s tr(X) / C I``,
    pyRiemann's ``Shrinkage`` (scikit-learn's ``shrunk_covariance``) of every matrix. Linear in
    ``covariance``."""
    n = covariance.shape[-1]
    mean_variance = covariance.diagonal(dim1=-2, dim2=-1).sum(-1) / n
    eye = torch.eye(n, dtype=covariance.dtype, device=covariance.device)
    return (1 - shrinkage) * covariance + shrinkage * mean_variance[..., None, None] * eye


def unshrink(shrunk: Tensor, shrinkage: float = SHRINKAGE) -> Tensor:
    """The inverse of :func:`shrink`: (..., C, C) S -> the X with ``shrink(X) = S``,
    ``(S - s tr(S) / C I) / (1 - s)`` (shrinking keeps the trace). X need not be positive
    semi-definite."""
    n = shrunk.shape[-1]
    mean_variance = shrunk.diagonal(dim1=-2, dim2=-1).sum(-1) / n
    eye = torch.eye(n, dtype=shrunk.dtype, device=shrunk.device)
    return (shrunk - shrinkage * mean_variance[..., None, None] * eye) / (1 - shrinkage)


def symmetrise(matrix: Tensor) -> Tensor:
    """(..., C, C) -> (..., C, C): ``(X + X^T) / 2``."""
    return (matrix + matrix.transpose(-1, -2)) / 2


def eigen_function(matrix: Tensor, function) -> Tensor:
    """``U f(diag) U^T`` of symmetric ``matrix`` (..., C, C) with ``function`` applied to its
    eigenvalues (no custom gradient: for mean points, computed without one)."""
    eigenvalues, eigenvectors = torch.linalg.eigh(matrix)
    return (eigenvectors * function(eigenvalues)[..., None, :]) @ eigenvectors.transpose(-1, -2)


def invsqrtm(matrix: Tensor) -> Tensor:
    """SPD (..., C, C) -> P^-1/2 (..., C, C), by ``eigh``, without gradient."""
    with torch.no_grad():
        return eigen_function(matrix.detach(), torch.rsqrt)


def log_divided_differences(eigenvalues: Tensor) -> Tensor:
    """(..., C) positive eigenvalues -> (..., C, C) ``L_ij = (log l_i - log l_j) / (l_i - l_j)``,
    ``1 / l_i`` on the diagonal: computed as ``log1p(x) / x / l_j`` with ``x = (l_i - l_j) /
    l_j`` (no cancellation of two nearly equal logarithms), its series ``(1 - x/2 + x^2/3) /
    l_j`` where ``|x|`` < :data:`EQUAL_EIGENVALUES`."""
    li, lj = eigenvalues[..., :, None], eigenvalues[..., None, :]
    x = (li - lj) / lj
    close = x.abs() < EQUAL_EIGENVALUES
    safe = torch.where(close, torch.ones_like(x), x)
    ratio = torch.where(close, 1 - x / 2 + x * x / 3, torch.log1p(safe) / safe)
    return ratio / lj


class _SPDLogarithm(torch.autograd.Function):
    """``logm`` of symmetric positive definite matrices with the Daleckii-Krein backward."""

    @staticmethod
    def forward(ctx, matrix: Tensor) -> Tensor:
        eigenvalues, eigenvectors = torch.linalg.eigh(matrix)
        ctx.save_for_backward(eigenvalues, eigenvectors)
        logs = eigenvalues.log()
        return (eigenvectors * logs[..., None, :]) @ eigenvectors.transpose(-1, -2)

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        eigenvalues, eigenvectors = ctx.saved_tensors
        rotated = eigenvectors.transpose(-1, -2) @ grad @ eigenvectors
        weighted = rotated * log_divided_differences(eigenvalues)
        return eigenvectors @ weighted @ eigenvectors.transpose(-1, -2)


def logm(matrix: Tensor) -> Tensor:
    """SPD (..., C, C) -> its matrix logarithm (..., C, C), symmetric, by ``eigh``.

    Backward (Daleckii-Krein): ``U [(U^T G U) o L] U^T`` with ``L`` of
    :func:`log_divided_differences`, the derivative of the logarithm as a matrix function, so
    gradients are finite where eigenvalues coincide (at the identity ``G`` itself). ``matrix``
    should be exactly symmetric (:func:`symmetrise` it): ``eigh`` reads its lower triangle."""
    return _SPDLogarithm.apply(matrix)


def upper(matrix: Tensor) -> Tensor:
    """Symmetric (..., C, C) -> (..., C(C+1)/2): pyRiemann's ``upper``, the upper triangle
    (diagonal included) in row-major order, the off-diagonal entries times sqrt(2) (so the
    Euclidean norm of the vector is the Frobenius norm of the matrix)."""
    n = matrix.shape[-1]
    rows, cols = torch.triu_indices(n, n, device=matrix.device)
    weights = torch.full(rows.shape, 2.0**0.5, dtype=matrix.dtype, device=matrix.device)
    weights[rows == cols] = 1.0
    return matrix[..., rows, cols] * weights


def tangent_vectors(covariance: Tensor, mean_invsqrt: Tensor) -> Tensor:
    """Shrunk covariances (B, K, C, C) (V^2, SPD) and the mean points' inverse square roots
    (K, C, C) (V^-1) -> float64 (B, K C(C+1)/2): per band ``upper(logm(P^-1/2 S P^-1/2))``
    (pyRiemann's ``TangentSpace(metric="riemann")``), bands side by side."""
    whitening = mean_invsqrt.to(torch.float64)
    whitened = whitening @ covariance.to(torch.float64) @ whitening
    return upper(logm(symmetrise(whitened))).flatten(1)


def n_tangent_features(n_bands: int, n_channels: int) -> int:
    """Width of :func:`tangent_vectors`: K C(C+1)/2."""
    return n_bands * n_channels * (n_channels + 1) // 2


class TangentSpacePath(nn.Module):
    """``covariance (B, K, C, C) raw, V^2 -> logits (B, n_classes)`` float32: :func:`shrink`,
    :func:`tangent_vectors` at the stored mean points, :attr:`classifier` (a
    :class:`LinearPath`, zero until its ``set_weights``).

    Buffers (the state dict holds tensors only): ``reference_invsqrt`` float64 (K, C, C), the
    mean points' P^-1/2 (V^-1; identity until :meth:`set_reference`), and the
    classifier's ``weight`` (n_classes, K C(C+1)/2) and ``bias`` (n_classes,). Casting the
    module (``.float()``, ``.to(dtype)``) casts the classifier and leaves ``reference_invsqrt``
    float64; moving it moves both.
    """

    reference_invsqrt: Tensor

    def __init__(self, n_bands: int, n_channels: int, n_classes: int):
        super().__init__()
        self.n_bands, self.n_channels = n_bands, n_channels
        eye = torch.eye(n_channels, dtype=torch.float64).expand(n_bands, -1, -1).clone()
        self.register_buffer("reference_invsqrt", eye)
        self.classifier = LinearPath(n_tangent_features(n_bands, n_channels), n_classes)

    def _apply(self, fn, recurse=True):
        """Moves follow ``fn``; dtype casts leave ``reference_invsqrt`` float64."""
        kept = self.reference_invsqrt
        super()._apply(fn, recurse)
        device = self.reference_invsqrt.device
        self._buffers["reference_invsqrt"] = kept.to(device=device, dtype=torch.float64)
        return self

    def set_reference(self, mean: np.ndarray | Tensor) -> None:
        """Store the mean points: ``mean`` (K, C, C), SPD, V^2 (the per-band Riemannian
        mean of the training recordings' shrunk covariances), as their float64 P^-1/2."""
        mean = symmetrise(torch.as_tensor(mean).detach().to(torch.float64))
        if mean.shape != self.reference_invsqrt.shape:
            raise ValueError(
                f"mean points of shape {tuple(mean.shape)}, the path's bands and channels are "
                f"{tuple(self.reference_invsqrt.shape)}"
            )
        self.reference_invsqrt.copy_(invsqrtm(mean).to(self.reference_invsqrt.device))

    def mean_points(self) -> Tensor:
        """The mean points P = (P^-1/2)^-2: float64 (K, C, C), V^2."""
        return eigen_function(symmetrise(self.reference_invsqrt), lambda v: v**-2)

    def features(self, covariance: Tensor) -> Tensor:
        """Raw covariances (B, K, C, C), V^2 -> float64 (B, K C(C+1)/2): the tangent vectors
        the classifier reads (a logistic regression is fitted on them and stored with
        ``classifier.set_weights``)."""
        return tangent_vectors(shrink(covariance.to(torch.float64)), self.reference_invsqrt)

    def logits64(self, covariance: Tensor) -> Tensor:
        """:meth:`forward` in float64 throughout (classifier weights cast up): float64
        (B, n_classes), what the attributions integrate."""
        weight, bias = self.classifier.weight, self.classifier.bias
        return self.features(covariance) @ weight.double().T + bias.double()

    def forward(self, covariance: Tensor) -> Tensor:
        return self.classifier(self.features(covariance)).float()


def baseline_covariance(path: TangentSpacePath) -> Tensor:
    """float64 (K, C, C), V^2: the raw covariance whose shrunk matrix is the mean point,
    ``(P - s tr(P) / C I) / (1 - s)`` (:func:`unshrink`): its tangent vector is zero. The
    straight line from it to any raw covariance shrinks to a convex combination of P and that
    covariance's shrunk matrix, positive definite all along."""
    return unshrink(path.mean_points())


#: A covariance whose rows sum to at most this fraction of its mean variance is taken as one
#: of average-referenced signals (every row of such a covariance sums to zero).
AVERAGE_REFERENCED = 1e-4


def average_referenced(covariance: Tensor) -> bool:
    """Whether every band's matrix of ``covariance`` (K, C, C) has rows summing to zero (up to
    :data:`AVERAGE_REFERENCED` of its mean variance): signals after the average reference."""
    variance = torch.diagonal(covariance, dim1=-2, dim2=-1).mean(-1)
    return bool((covariance.sum(-1).abs().amax(-1) <= AVERAGE_REFERENCED * variance).all())


def average_reference_projector(n_channels: int, device=None) -> Tensor:
    """float64 (C, C): ``I - 1 1^T / C``, the average reference as a matrix."""
    eye = torch.eye(n_channels, dtype=torch.float64, device=device)
    return eye - 1.0 / n_channels


def attribution_baseline(path: TangentSpacePath, covariance: Tensor) -> Tensor:
    """float64 (K, C, C), V^2: the baseline :func:`tangent_space_attributions` integrates from
    for ``covariance``: :func:`baseline_covariance`, average-referenced (projected) when
    ``covariance`` is (:func:`average_referenced`)."""
    baseline = baseline_covariance(path)
    if not average_referenced(covariance.to(baseline)):
        return baseline
    projector = average_reference_projector(baseline.shape[-1], baseline.device)
    return projector @ baseline @ projector


def tangent_space_attributions(
    path: TangentSpacePath, covariance: np.ndarray | Tensor, target: int, n_steps: int = 64
) -> tuple[np.ndarray, float]:
    """Integrated Gradients (captum's ``IntegratedGradients``, Gauss-Legendre, ``n_steps``) of
    the logit of class ``target`` (float64, :meth:`TangentSpacePath.logits64`; a binary model's
    logits are -z/2, +z/2, and the one of ``target`` is taken as is) onto the raw covariance
    entries of one recording, ``covariance`` (K, C, C), V^2, from
    :func:`attribution_baseline`.

    A covariance of average-referenced signals (:func:`average_referenced`) lies where every
    row sums to zero; the entries are then redundant (a variance is minus the sum of its
    row's covariances), and the gradient at such a matrix has parts along directions no
    recording moves in, which the shrinkage's small eigenvalue on the all-ones direction makes
    large: an entry's attribution would then be that part times its change, large and of
    either sign, cancelling across entries. So the logit is integrated as a function of the
    average-referenced matrix, ``logit(Pi C Pi)`` with ``Pi = I - 1 1^T / C`` (the same logit
    for every recording, which is already average-referenced), from the average-referenced
    baseline: a channel's variance then carries what its power does.

    Returns ``(attributions, delta)``: float64 (K, C, C), symmetric ``(A + A^T) / 2`` (entries
    (i, j) and (j, i) together carry the pair), in logit units, summing to
    ``logit(covariance) - logit(baseline)`` up to ``delta`` (captum's convergence delta: sum of
    the attributions minus that difference)."""
    from captum.attr import IntegratedGradients  # loaded only where attributions are asked for

    device = path.reference_invsqrt.device
    inputs = torch.as_tensor(covariance).detach().to(device=device, dtype=torch.float64)[None]
    baseline = attribution_baseline(path, inputs[0])[None]
    projector = (
        average_reference_projector(inputs.shape[-1], device)
        if average_referenced(inputs[0])
        else None
    )

    def logits(matrix: Tensor) -> Tensor:
        return path.logits64(matrix if projector is None else projector @ matrix @ projector)

    integrated = IntegratedGradients(logits)
    attributions, delta = integrated.attribute(
        inputs,
        baselines=baseline,
        target=int(target),
        n_steps=n_steps,
        method="gausslegendre",
        return_convergence_delta=True,
    )
    return symmetrise(attributions[0].detach()).cpu().numpy(), float(delta.reshape(-1)[0])


def log_variance_correlation(covariance: Tensor) -> tuple[Tensor, Tensor]:
    """Covariances (..., C, C), V^2, positive variances -> ``(log variance (..., C), log V^2;
    correlation (..., C, C), dimensionless, 1 on the diagonal)``."""
    log_variance = torch.diagonal(covariance, dim1=-2, dim2=-1).log()
    scale = torch.exp(-log_variance / 2)
    return log_variance, covariance * scale[..., :, None] * scale[..., None, :]


def from_log_variance_correlation(log_variance: Tensor, correlation: Tensor) -> Tensor:
    """The inverse of :func:`log_variance_correlation`: (..., C) and (..., C, C) -> the
    covariances (..., C, C), V^2."""
    scale = torch.exp(log_variance / 2)
    return correlation * scale[..., :, None] * scale[..., None, :]


def log_power_attributions(
    path: TangentSpacePath, covariance: np.ndarray | Tensor, target: int, n_steps: int = 64
) -> tuple[np.ndarray, float]:
    """Integrated Gradients (captum, Gauss-Legendre, ``n_steps``) of the logit of class
    ``target`` (as in :func:`tangent_space_attributions`) of one recording's ``covariance``
    (K, C, C), V^2, onto its coordinates of :func:`log_variance_correlation`: each channel's log
    variance in each band and each pair's correlation, along the straight line in those
    coordinates from :func:`attribution_baseline`'s (so every variance stays positive and
    every correlation matrix is a convex combination of two). The logit is taken of the
    average-referenced matrix rebuilt from them (``Pi C Pi``, for a covariance that is
    average-referenced, as :func:`tangent_space_attributions` does), which is the recording's
    at the line's end and the baseline's at its start.

    Why these coordinates: a gain g on one channel's signal adds 2 log g to its log variance and
    leaves every correlation as it was (before the average reference; nearly so after), so
    what the path reads of that gain lands on the channel's power; on the raw entries it is
    split between the variance and the covariances of the channel's row.

    Returns ``(attributions, delta)``: float64 (K, C, C) in logit units, the diagonal each
    channel's log variance's (its band power's), entries (i, j) and (j, i) together the
    pair's correlation's (symmetric, halves); they sum to ``logit(covariance) -
    logit(baseline)`` up to ``delta`` (captum's convergence delta). A band with a variance
    that is not positive (in the recording or the baseline) has no log: then every band's
    attributions are :func:`tangent_space_attributions`' (raw entries)."""
    from captum.attr import IntegratedGradients  # loaded only where attributions are asked for

    device = path.reference_invsqrt.device
    matrix = torch.as_tensor(covariance).detach().to(device=device, dtype=torch.float64)
    baseline = attribution_baseline(path, matrix)
    variances = torch.cat([torch.diagonal(m, dim1=-2, dim2=-1) for m in (matrix, baseline)])
    if not bool((variances > 0).all()):
        return tangent_space_attributions(path, covariance, target, n_steps)
    projector = (
        average_reference_projector(matrix.shape[-1], device)
        if average_referenced(matrix)
        else None
    )

    def logits(log_variance: Tensor, correlation: Tensor) -> Tensor:
        rebuilt = from_log_variance_correlation(log_variance, correlation)
        return path.logits64(rebuilt if projector is None else projector @ rebuilt @ projector)

    inputs = tuple(x[None] for x in log_variance_correlation(matrix))
    baselines = tuple(x[None] for x in log_variance_correlation(baseline))
    (power, pairs), delta = IntegratedGradients(logits).attribute(
        inputs,
        baselines=baselines,
        target=int(target),
        n_steps=n_steps,
        method="gausslegendre",
        return_convergence_delta=True,
    )
    attributions = symmetrise(pairs[0].detach())  # the diagonal's correlation stays 1: zero
    attributions = attributions + torch.diag_embed(power[0].detach())
    return attributions.cpu().numpy(), float(delta.reshape(-1)[0])
